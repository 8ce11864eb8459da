package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestArgmax: the rule on rows whose answer follows from the definition
// alone (ties, infinities, NaNs, signed zeros), in float32 and float64.
func TestArgmax(t *testing.T) {
	inf, nan, negZero := math.Inf(1), math.NaN(), math.Copysign(0, -1)
	for _, c := range []struct {
		x    []float64
		want int
	}{
		{[]float64{5}, 0},
		{[]float64{nan}, 0},
		{[]float64{-inf, -inf, -inf}, 0},
		{[]float64{-inf, -7, -inf}, 1},
		{[]float64{1, 3, 2, 3, 3}, 1},
		{[]float64{1, 2, inf, 3, inf}, 2},
		{[]float64{1, inf, nan, 3, nan}, 2},
		{[]float64{nan, inf, 2}, 0},
		{[]float64{-1, negZero, 0, -2}, 1},
		{[]float64{-1, 0, negZero}, 1},
	} {
		if got := tensor.Argmax(c.x); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.x, got, c.want)
		}
		if got := tensor.Argmax(tensorConvert(c.x)); got != c.want {
			t.Errorf("Argmax(float32 %v) = %d, want %d", c.x, got, c.want)
		}
	}
}

func tensorConvert(x []float64) []float32 {
	f := make([]float32, len(x))
	for i, v := range x {
		f[i] = float32(v)
	}
	return f
}

// TestCPUArgmaxRowsF64: the float64 CPU backend (its rows split over
// workers) against the brute-force reference on the conformance suite's
// inputs; the float32 one runs in TestCPUConformance.
func TestCPUArgmaxRowsF64(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 7))
	for _, workers := range []int{1, 3} {
		cpu := tensor.NewCPU[float64](workers)
		for _, sh := range backendtest.ArgmaxShapes {
			rows, cols := sh[0], sh[1]
			t.Run(fmt.Sprintf("workers%d_rows%d_cols%d", workers, rows, cols), func(t *testing.T) {
				x := backendtest.ArgmaxInput(rng, rows, cols)
				got := tensor.RowArgmax[float64](cpu, tensor.FromData("x", x, rows, cols))
				if want := backendtest.NaiveArgmax(x, rows, cols); !slices.Equal(got, want) {
					t.Errorf("got %v, want %v", got, want)
				}
			})
		}
	}
}
