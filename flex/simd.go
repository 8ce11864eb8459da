package flex

import (
	"dflash/internal/avx2"
	"dflash/internal/cpufeat"
)

// hasAVX2FMA selects the AVX2/FMA kernels of package avx2 (see package
// cpufeat); tests turn it off to run the portable kernels.
var hasAVX2FMA = cpufeat.AVX2FMA

// expShift32 sets x[i] = exp(x[i] - shift) and returns the sum, with
// avx2.ExpShift8 for the multiple-of-8 head and exp32 for the rest.
func expShift32(x []float32, shift float32) float32 {
	n8 := len(x) &^ 7
	sum := avx2.ExpShift8(x[:n8], shift)
	for i := n8; i < len(x); i++ {
		x[i] = exp32(x[i] - shift)
		sum += x[i]
	}
	return sum
}
