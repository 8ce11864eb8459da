package train

import (
	"fmt"
	"maps"
	"slices"
)

// DefaultBucketBytes is the gradient bucket size of Run when
// Hooks.BucketBytes is 0.
const DefaultBucketBytes = 25 << 20

// Bucket is a contiguous range [Lo, Hi) of the flat gradient, in elements,
// made of whole parameters: the unit of one all-reduce.
type Bucket struct{ Lo, Hi int }

// PlanBuckets cuts the flat gradient of parameters of sizes elements each
// (in arena order) into buckets for the all-reduce: whole parameters, in
// reverse order, so that the first bucket holds the last parameters (whose
// gradients a backward pass completes first, ready to be reduced while it
// goes on). A bucket takes parameters until it holds at least bucketBytes
// (elemBytes per element); only the last bucket may hold less. Every
// element is in exactly one bucket; parameters of no elements are in none.
func PlanBuckets(sizes []int, elemBytes int, bucketBytes int64) []Bucket {
	var out []Bucket
	hi := 0
	for _, n := range sizes {
		hi += n
	}
	lo := hi
	for i := len(sizes) - 1; i >= 0; i-- {
		lo -= sizes[i]
		if int64(hi-lo)*int64(elemBytes) >= bucketBytes {
			out = append(out, Bucket{lo, hi})
			hi = lo
		}
	}
	if hi > 0 {
		out = append(out, Bucket{0, hi})
	}
	return out
}

// gradSync is the data-parallel part of a Run on more than one rank: it
// sums the flat gradient over the ranks bucket by bucket (Run then scales
// by 1/ranks along with 1/micro-batches, so every rank holds the mean, the
// same bits everywhere, and clipping sees the global norm), and averages
// the step's loss and metrics.
type gradSync struct {
	coll    Collective
	grads   func(lo, hi int) Buffer
	buckets []Bucket
}

// newGradSync returns the gradient sync of h over the gradient of params, or nil when h.Collective has
// one rank (or none): then Run makes no collective call at all.
func newGradSync(h Hooks, params *Params) *gradSync {
	if h.Collective == nil || h.Collective.Size() == 1 {
		return nil
	}
	ps := params.Arena().Params()
	sizes := make([]int, len(ps))
	for i, p := range ps {
		sizes[i] = p.Numel()
	}
	bytes := h.BucketBytes
	if bytes <= 0 {
		bytes = DefaultBucketBytes
	}
	return &gradSync{coll: h.Collective, grads: params.GradRange, buckets: PlanBuckets(sizes, 4, bytes)}
}

// allReduce sums the gradient over the ranks, bucket by bucket.
func (s *gradSync) allReduce() error {
	for i, b := range s.buckets {
		if err := s.coll.AllReduceSum(s.grads(b.Lo, b.Hi)); err != nil {
			return fmt.Errorf("gradient bucket %d of %d [%d, %d): %w", i+1, len(s.buckets), b.Lo, b.Hi, err)
		}
	}
	return nil
}

// average replaces the step's loss and metric sums by their means over
// the ranks and totals (tokens, samples...) by their sums, in one
// collective.
func (s *gradSync) average(loss *float64, totals []float64, sums map[string]float64) error {
	keys := slices.Sorted(maps.Keys(sums))
	x := append([]float64{*loss}, totals...)
	for _, k := range keys {
		x = append(x, sums[k])
	}
	if err := s.coll.AllReduceFloat64(x); err != nil {
		return fmt.Errorf("step metrics: %w", err)
	}
	n := float64(s.coll.Size())
	*loss = x[0] / n
	copy(totals, x[1:])
	for i, k := range keys {
		sums[k] = x[1+len(totals)+i] / n
	}
	return nil
}
