package diskspeed

import (
	"os"
	"testing"

	"dflash/internal/directio"
)

// TestWrite: a measurement writes the rounded-up size, reports a rate
// consistent with its time, and leaves the directory as it found it.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	const block = 16 * directio.Align
	res, err := Write(dir, 5*block+100, block)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(5*block + directio.Align); res.Bytes != want || res.BlockBytes != block {
		t.Errorf("%d bytes in blocks of %d, want %d in blocks of %d", res.Bytes, res.BlockBytes, want, block)
	}
	if res.Seconds <= 0 || res.GBPerS != float64(res.Bytes)/1e9/res.Seconds {
		t.Errorf("%v GB/s in %v s for %d bytes", res.GBPerS, res.Seconds, res.Bytes)
	}
	t.Logf("direct writes: %v", res.Direct)
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("the directory holds %d entries (%v), want none", len(ents), err)
	}
	if _, err := Write(dir, 1, directio.Align+1); err == nil {
		t.Error("a block that is not a multiple of the alignment was accepted")
	}
}
