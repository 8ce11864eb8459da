package dflash

import (
	"slices"
	"testing"

	"dflash/internal/testseed"
)

// TestExampleAnchors: an example's anchors depend on the seed and the
// example only: the same in any batch, at any row, next to any other
// examples (what lets data-parallel ranks that split a batch draw what one
// rank draws); another seed draws others; padding rows get none; every
// anchor is a candidate of its row.
func TestExampleAnchors(t *testing.T) {
	rng := testseed.New(t)
	ex := make([]Example, 12)
	for i := range ex {
		n := 20 + rng.IntN(40)
		ex[i] = Example{IDs: make([]int32, n), Mask: make([]uint8, n)}
		for j := n / 4; j < n; j++ {
			ex[i].Mask[j] = 1
		}
	}
	seed := rng.Uint64()
	anchorsOf := func(idx []int, rows int) map[int][]int32 {
		b := MakeBatch(ex, idx, 0)
		if rows > len(idx) {
			b = MakeFixedBatch(ex, idx, 0, rows, b.Len)
		}
		got := ExampleAnchors(seed, b, 6, 0)
		out := map[int][]int32{}
		for r, a := range got {
			if r >= len(idx) {
				if len(a) != 0 {
					t.Fatalf("padding row %d got anchors %v", r, a)
				}
				continue
			}
			cands := Candidates(b.LossMask[r*b.Len:(r+1)*b.Len], b.SeqLen[r])
			for _, x := range a {
				if !slices.Contains(cands, x) {
					t.Fatalf("example %d: anchor %d is not a candidate", idx[r], x)
				}
			}
			out[idx[r]] = a
		}
		return out
	}
	whole := anchorsOf([]int{0, 1, 2, 3, 4, 5}, 6)
	for _, part := range [][]int{{3, 1}, {5, 0, 4}, {2}} {
		for i, a := range anchorsOf(part, 4) {
			if !slices.Equal(a, whole[i]) {
				t.Fatalf("example %d: anchors %v in batch %v, %v in the whole batch", i, a, part, whole[i])
			}
		}
	}
	seed++
	differ := false
	for i, a := range anchorsOf([]int{0, 1, 2, 3, 4, 5}, 6) {
		differ = differ || !slices.Equal(a, whole[i])
	}
	if !differ {
		t.Fatal("another seed drew the same anchors for every example")
	}
}
