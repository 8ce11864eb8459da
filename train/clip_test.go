package train

import (
	"math"
	"testing"

	"dflash/internal/testseed"
)

func TestClipGradNorm(t *testing.T) {
	seed := testseed.Seed(t)
	r := NewRNG(seed, 0)
	mk := func(scale float64) []*Param {
		ps := []*Param{NewParam("a", 5, 3), NewParam("b", 4), NewParam("c")}
		for _, p := range ps {
			for i := range p.Grad {
				p.Grad[i] = float32(scale * r.NormFloat64())
			}
		}
		return ps
	}
	brute := func(ps []*Param) float64 {
		var s float64
		for _, p := range ps {
			for _, g := range p.Grad {
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
			ps := mk(c.scale)
			before := snapshotGrads(ps)
			want := brute(ps)
			got := ClipGradNorm(ps, c.max)
			if math.Abs(got-want) > 1e-12*want {
				t.Fatalf("norm %g, brute force %g", got, want)
			}
			after := brute(ps)
			if c.wantClipped {
				if math.Abs(after-c.wantNormAfter) > 1e-5 {
					t.Fatalf("norm after clipping %g, want %g", after, c.wantNormAfter)
				}
				// Direction kept: every gradient scaled by the same factor.
				f := float64(ps[0].Grad[0]) / float64(before[0][0])
				for i, p := range ps {
					for j, g := range p.Grad {
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
		ps := mk(1)
		ps[1].Grad[2] = float32(math.Inf(1))
		if n := ClipGradNorm(ps, 1); !math.IsInf(n, 1) {
			t.Fatalf("norm %g, want +Inf", n)
		}
	})
}

func snapshotGrads(ps []*Param) [][]float32 {
	out := make([][]float32, len(ps))
	for i, p := range ps {
		out[i] = append([]float32(nil), p.Grad...)
	}
	return out
}
