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

// TestShard checks that, for 1, 2, 3 and 4 ranks, the ranks' shares of each
// global batch are disjoint and together are the unsharded order's batch,
// in order; and that a position saved with one rank count restores with
// another at the same place in the global order.
func TestShard(t *testing.T) {
	seed := testseed.Seed(t)
	const n, batch = 23, 6
	whole := New(n, batch, seed, 4)
	var want [][]int
	for range 12 { // three epochs and more
		want = append(want, slices.Clone(whole.Next()))
	}
	for ranks := 1; ranks <= 4; ranks++ {
		shards := make([]*Order, ranks)
		for r := range shards {
			shards[r] = New(n, batch, seed, 4).Shard(r, ranks)
		}
		for b, w := range want {
			var got []int
			for r, o := range shards {
				share := o.Next()
				if d := len(share) - batch/ranks; d < 0 || d > 1 {
					t.Fatalf("%d ranks, batch %d: rank %d got %d items", ranks, b, r, len(share))
				}
				got = append(got, share...)
			}
			if !slices.Equal(got, w) {
				t.Fatalf("%d ranks, batch %d: shares %v, want %v", ranks, b, got, w)
			}
		}
	}
	// Save on 2 ranks after 5 global batches, resume on 3 and on 1.
	two := New(n, batch, seed, 4).Shard(1, 2)
	for range 5 {
		two.Next()
	}
	st, err := two.State()
	if err != nil {
		t.Fatal(err)
	}
	for _, ranks := range []int{1, 3} {
		var got []int
		for r := range ranks {
			o := New(n, batch, seed, 4).Shard(r, ranks)
			if err := o.Restore(st); err != nil {
				t.Fatal(err)
			}
			got = append(got, o.Next()...)
		}
		if !slices.Equal(got, want[5]) {
			t.Fatalf("resumed on %d ranks: %v, want %v", ranks, got, want[5])
		}
	}
}
