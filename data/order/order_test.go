package order

import (
	"slices"
	"testing"

	"dflash/internal/testseed"
)

// TestOrder checks that every epoch hands out distinct indices (the items a
// batch would run past the end of the epoch with are skipped), that epochs
// differ, and that Restore from State continues with the same batches.
func TestOrder(t *testing.T) {
	seed := testseed.Seed(t)
	const n, batch = 11, 3 // 3 batches per epoch, 2 items left out each epoch
	o := New(n, batch, seed, 4)
	var epochs [][]int
	for e := 0; e < 4; e++ {
		var seen []int
		for range n / batch {
			seen = append(seen, o.Next()...)
		}
		sorted := slices.Sorted(slices.Values(seen))
		if len(slices.Compact(sorted)) != len(seen) {
			t.Fatalf("epoch %d repeats an index: %v", e, seen)
		}
		for _, i := range seen {
			if i < 0 || i >= n {
				t.Fatalf("epoch %d: index %d outside [0, %d)", e, i, n)
			}
		}
		epochs = append(epochs, seen)
	}
	if slices.Equal(epochs[0], epochs[1]) && slices.Equal(epochs[1], epochs[2]) {
		t.Fatalf("three epochs in the same order: %v", epochs[0])
	}
	// Save mid-epoch, draw on, restore into a fresh order: the same batches follow.
	o.Next()
	st, err := o.State()
	if err != nil {
		t.Fatal(err)
	}
	var want [][]int
	for range 5 {
		want = append(want, slices.Clone(o.Next()))
	}
	r := New(n, batch, seed, 4)
	if err := r.Restore(st); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if got := r.Next(); !slices.Equal(got, w) {
			t.Fatalf("batch %d after restore: %v, want %v", i, got, w)
		}
	}
}
