package train

import (
	"math"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

func TestClipGradNorm(t *testing.T) {
	seed := testseed.Seed(t)
	r := NewRNG(seed, 0)
	mk := func(t *testing.T, scale float64) (*Params, []*tensor.Tensor) {
		a := testArena("a", []int{5, 3}, "b", []int{4}, "c", []int{})
		for i := range a.HostGrad() {
			a.HostGrad()[i] = float32(scale * r.NormFloat64())
		}
		return mustParams(t, a, tensor.AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}), a.Params()
	}
	brute := func(ps []*tensor.Tensor) float64 {
		var s float64
		for _, p := range ps {
			for _, g := range p.Grad() {
				s += float64(g) * float64(g)
			}
		}
		return math.Sqrt(s)
	}
	cases := []struct {
		name          string
		scale, max    float64
		wantClipped   bool
		wantNormAfter float64 // when clipped
	}{
		{"clips", 10, 1, true, 1},
		{"leaves-small", 0.01, 1, false, 0},
		{"measure-only", 10, 0, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			params, ps := mk(t, c.scale)
			before := snapshotGrads(ps)
			want := brute(ps)
			got := params.ClipGradNorm(c.max)
			if math.Abs(got-want) > 1e-12*want {
				t.Fatalf("norm %g, brute force %g", got, want)
			}
			after := brute(ps)
			if c.wantClipped {
				if math.Abs(after-c.wantNormAfter) > 1e-5 {
					t.Fatalf("norm after clipping %g, want %g", after, c.wantNormAfter)
				}
				// Direction kept: every gradient scaled by the same factor.
				f := float64(ps[0].Grad()[0]) / float64(before[0][0])
				for i, p := range ps {
					for j, g := range p.Grad() {
						if math.Abs(float64(g)-f*float64(before[i][j])) > 1e-6*math.Abs(float64(before[i][j])) {
							t.Fatalf("%s[%d] not scaled uniformly", p.Name, j)
						}
					}
				}
			} else {
				assertSameBits(t, "grads", before, snapshotGrads(ps))
			}
		})
	}
	t.Run("non-finite", func(t *testing.T) {
		params, ps := mk(t, 1)
		ps[1].Grad()[2] = float32(math.Inf(1))
		if n := params.ClipGradNorm(1); !math.IsInf(n, 1) {
			t.Fatalf("norm %g, want +Inf", n)
		}
	})
}

func snapshotGrads(ps []*tensor.Tensor) [][]float32 {
	out := make([][]float32, len(ps))
	for i, p := range ps {
		out[i] = append([]float32(nil), p.Grad()...)
	}
	return out
}
