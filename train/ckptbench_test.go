package train

import (
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"testing"

	"dflash/internal/testseed"
	"dflash/safetensors"
)

// TestWriteSummed: the size and CRC-32C that writeSummed computes as the
// bytes go out equal those of the file read back, and the file holds the
// snapshot's values bit for bit; the large case spans several of
// WriteBlocks' blocks and a tail.
func TestWriteSummed(t *testing.T) {
	seed := testseed.Seed(t)
	for _, c := range []struct {
		name string
		n    int
	}{{"small", 1000*benchRowWidth + 17}, {"blocks", 2*benchRowWidth*benchRowWidth + 1001}} {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && c.n > 1<<24 {
				t.Skip("writes 128 MB")
			}
			s := randomSnapshot(c.n, seed)
			path := filepath.Join(t.TempDir(), ModelFile)
			sum, err := s.saveValues(path)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := FileSum{Size: int64(len(raw)), CRC32C: crc32.Checksum(raw, crc32.MakeTable(crc32.Castagnoli))}
			if sum != want {
				t.Errorf("writeSummed says %+v, the file read back %+v", sum, want)
			}
			f, err := safetensors.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, p := range s.layout {
				got, err := f.Float32(p.name)
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range got {
					if w := s.values[p.off+i]; math.Float32bits(v) != math.Float32bits(w) {
						t.Fatalf("%s[%d] = %v, wrote %v", p.name, i, v, w)
					}
				}
			}
		})
	}
}

// TestCheckpointBench: each write reports the checkpoint's size
// (the tensors' 12 bytes a parameter and small files beside them) and a
// rate consistent with its time, and leaves nothing in the directory.
func TestCheckpointBench(t *testing.T) {
	dir := t.TempDir()
	const n = 300000
	b, err := NewCheckpointBench(12*n+11, testseed.Seed(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		w, err := b.Write(dir)
		if err != nil {
			t.Fatal(err)
		}
		if w.Bytes < 12*n || w.Bytes > 12*n+1<<16 {
			t.Errorf("write %d: %d bytes, want 12·%d and at most 64 KiB of headers and small files", i, w.Bytes, n)
		}
		if rate := float64(w.Bytes) / 1e9 / w.Seconds; w.Seconds <= 0 || math.Abs(rate-w.GBPerS) > 0.0005+1e-9 {
			t.Errorf("write %d: %.3f GB/s for %d bytes in %.3f s", i, w.GBPerS, w.Bytes, w.Seconds)
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("the directory holds %d entries (%v) after the writes, want none", len(ents), err)
	}
}
