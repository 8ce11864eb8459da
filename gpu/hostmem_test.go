package gpu

import (
	"testing"
	"unsafe"
)

// TestHostPieces: a copy into AllocHost's memory is split at its pieces'
// boundaries (counted from the allocation's start, wherever the copy
// starts), the parts cover the copy in order, and a copy elsewhere is one
// part.
func TestHostPieces(t *testing.T) {
	b, err := mapHost(3*hostChunk + 100)
	if err != nil {
		t.Fatal(err)
	}
	defer unmapHost(b)
	d := &Device{}
	d.pinned.alloc = map[*byte][]byte{&b[0]: b}
	type part struct{ off, n int64 }
	parts := func(p unsafe.Pointer, n int64) []part {
		var ps []part
		if err := d.hostPieces(p, n, func(off, n int64) error { ps = append(ps, part{off, n}); return nil }); err != nil {
			t.Fatal(err)
		}
		return ps
	}
	for _, c := range []struct {
		start, n int64
		want     []part
	}{
		{0, int64(len(b)), []part{{0, hostChunk}, {hostChunk, hostChunk}, {2 * hostChunk, hostChunk}, {3 * hostChunk, 100}}},
		{10, hostChunk, []part{{0, hostChunk - 10}, {hostChunk - 10, 10}}},
		{hostChunk + 5, 20, []part{{0, 20}}},
		{2*hostChunk - 1, hostChunk + 2, []part{{0, 1}, {1, hostChunk}, {hostChunk + 1, 1}}},
	} {
		got := parts(unsafe.Pointer(&b[c.start]), c.n)
		if len(got) != len(c.want) {
			t.Fatalf("copy of %d at %d: parts %v, want %v", c.n, c.start, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("copy of %d at %d: parts %v, want %v", c.n, c.start, got, c.want)
			}
		}
	}
	other := make([]byte, 3*hostChunk)
	if got := parts(unsafe.Pointer(&other[0]), int64(len(other))); len(got) != 1 || got[0] != (part{0, int64(len(other))}) {
		t.Fatalf("copy outside AllocHost's memory: parts %v, want one", got)
	}
}

// TestTouchPagesKeepsZeros: every byte of touched memory is still zero
// (the mapping's pages are backed, not written with anything else).
func TestTouchPagesKeepsZeros(t *testing.T) {
	b, err := mapHost(5<<20 + 123)
	if err != nil {
		t.Fatal(err)
	}
	defer unmapHost(b)
	touchPages(b)
	for i, v := range b {
		if v != 0 {
			t.Fatalf("byte %d is %d after touchPages", i, v)
		}
	}
}
