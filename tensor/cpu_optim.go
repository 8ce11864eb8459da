package tensor

import (
	"fmt"
	"math"
	"slices"
)

// NewAdamState returns zero AdamW state for a in host memory.
func (c *CPU[T]) NewAdamState(a *Arena[T], h AdamW, decay []bool) (*AdamState[T], error) {
	if a.Values == nil {
		return nil, fmt.Errorf("tensor: AdamW: the arena is frozen (it keeps no master values)")
	}
	if len(decay) != len(a.params) {
		return nil, fmt.Errorf("tensor: AdamW: %d decay flags for %d parameters", len(decay), len(a.params))
	}
	return &AdamState[T]{Config: h, M: make(Host[T], a.size), V: make(Host[T], a.size), Decay: slices.Clone(decay)}, nil
}

// adamGrain is the least number of elements AdamWStep gives a goroutine.
const adamGrain = 1 << 16

// AdamWStep applies one AdamW update to a's host values, one pass over the
// flat index space split among the workers.
func (c *CPU[T]) AdamWStep(a *Arena[T], s *AdamState[T], lr float64) {
	s.Steps++
	stepSize, bc2Sqrt, shrink := s.Config.Scalars(lr, s.Steps)
	p, g := HostData(a.Values, "AdamW values"), HostData(a.Grad, "AdamW gradient")
	m, v := HostData(s.M, "AdamW exp_avg"), HostData(s.V, "AdamW exp_avg_sq")
	checkLen("AdamW gradient", len(g), len(p))
	checkLen("AdamW exp_avg", len(m), len(p))
	checkLen("AdamW exp_avg_sq", len(v), len(p))
	h := s.Config
	c.parallel(len(p), adamGrain, func(lo, hi int) {
		first, _ := slices.BinarySearch(a.offs, lo+1) // parameters starting at or before lo
		for i := max(first-1, 0); i < len(a.params) && a.offs[i] < hi; i++ {
			off := a.offs[i]
			from, to := max(lo, off), min(hi, off+a.params[i].Numel())
			k := 1.0
			if s.Decay[i] {
				k = shrink
			}
			for j := from; j < to; j++ {
				gj := float64(g[j])
				w := float64(p[j]) * k
				m[j] = T(h.Beta1*float64(m[j]) + (1-h.Beta1)*gj)
				v[j] = T(h.Beta2*float64(v[j]) + (1-h.Beta2)*gj*gj)
				w -= stepSize * float64(m[j]) / (math.Sqrt(float64(v[j]))/bc2Sqrt + h.Eps)
				p[j] = T(w)
			}
		}
	})
}

// WriteAdamState copies m and v into s.
func (c *CPU[T]) WriteAdamState(s *AdamState[T], m, v []T) {
	dm, dv := HostData(s.M, "AdamW exp_avg"), HostData(s.V, "AdamW exp_avg_sq")
	checkLen("WriteAdamState exp_avg", len(m), len(dm))
	checkLen("WriteAdamState exp_avg_sq", len(v), len(dv))
	copy(dm, m)
	copy(dv, v)
}

// SumSquares returns Σ x[i]², summed in float64 in index order.
func (c *CPU[T]) SumSquares(s Storage[T]) float64 {
	var sum float64
	for _, x := range HostData(s, "SumSquares input") {
		sum += float64(x) * float64(x)
	}
	return sum
}
