package tensor_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestNormRoPEMatchesComposition: NormRoPEHeads and NormRoPE give the
// values and gradients (x and w) of the ops they fuse,
// Transpose12(RoPE(RMSNorm(x, w))) (RoPE alone without w), on the CPU in
// float64 (to rounding) and float32, with enough head rows that the weight
// gradient is summed in several parts.
func TestNormRoPEMatchesComposition(t *testing.T) {
	seed := testseed.Seed(t)
	const b, n, heads, hd, eps = 3, 50, 4, 16, 1e-6
	r, err := tensor.NewRope(hd, 1e6, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		weight, move bool
	}{{true, true}, {false, true}, {true, false}, {false, false}} {
		for _, workers := range []int{1, 4} {
			t.Run(fmt.Sprintf("weight=%v/move=%v/workers=%d", c.weight, c.move, workers), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(workers)))
				pos := make([]int32, b*n)
				for i := range pos {
					pos[i] = int32(rng.IntN(5000))
				}
				x := randVals(rng, b*n*heads*hd, 0, 3)
				w := randVals(rng, hd, 1, 0.3)
				dy := randVals(rng, len(x), 0, 1)
				fused := normRoPERun(tensor.NewCPU[float64](workers), x, w, dy, pos, r, c.weight, c.move, true)
				comp := normRoPERun(tensor.NewCPU[float64](workers), x, w, dy, pos, r, c.weight, c.move, false)
				f32 := normRoPERun(tensor.NewCPU[float32](workers), x, w, dy, pos, r, c.weight, c.move, true)
				for i, what := range []string{"y", "dx", "dw"} {
					if comp[i] == nil {
						continue
					}
					backendtest.Close(t, what+" float64", fused[i], comp[i], 1e-12)
					backendtest.Close(t, what+" float32", f32[i], comp[i], 2e-5)
				}
			})
		}
	}
}

func randVals(rng *rand.Rand, n int, mean, std float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = mean + std*rng.NormFloat64()
	}
	return v
}

// normRoPERun returns the output and the gradients of x and w (nil without
// a weight) for dy, from the fused op or from the composition, as float64.
func normRoPERun[T tensor.Float](be tensor.Backend[T], x, w, dy []float64, pos []int32, r *tensor.Rope, weight, move, fused bool) [3][]float64 {
	const b, n, hd = 3, 50, 16
	heads := len(x) / (b * n * hd)
	conv := func(v []float64) []T {
		out := make([]T, len(v))
		for i, f := range v {
			out[i] = T(f)
		}
		return out
	}
	tp := tensor.NewTape(be)
	xt := tensor.FromData("x", conv(x), b, n, heads, hd)
	xt.RequiresGrad = true
	var wt *tensor.Of[T]
	if weight {
		wt = tensor.FromData("w", conv(w), hd)
		wt.RequiresGrad = true
	}
	table := tensor.Table(be, r, pos)
	var y *tensor.Of[T]
	switch {
	case fused && move:
		y = tp.NormRoPEHeads(xt, wt, 1e-6, table)
	case fused:
		y = tp.NormRoPE(xt, wt, 1e-6, table)
	default:
		y = xt
		if weight {
			y = tp.RMSNorm(y, wt, 1e-6)
		}
		y = tp.RoPE(y, table)
		if move {
			y = tp.Transpose12(y)
		}
	}
	tp.BackwardFrom(y, tensor.Host[T](conv(dy)))
	back := func(v []T) []float64 {
		out := make([]float64, len(v))
		for i, f := range v {
			out[i] = float64(f)
		}
		return out
	}
	out := [3][]float64{back(y.Data()), back(xt.Grad())}
	if weight {
		out[2] = back(wt.Grad())
	}
	return out
}
