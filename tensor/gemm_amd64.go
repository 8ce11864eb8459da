//go:build amd64

package tensor

import "dflash/internal/cpufeat"

//go:noescape
func sgemm6x16(k int, ap, bp, c *float32, ldc int, alpha float32)

// hasAVX2FMA selects the AVX2/FMA kernels (see package cpufeat).
var hasAVX2FMA = cpufeat.AVX2FMA

// fastKernel returns the AVX2/FMA 6×16 float32 micro-kernel when the CPU has it.
func fastKernel[T Float]() (microKernel[T], bool) {
	if !hasAVX2FMA {
		return microKernel[T]{}, false
	}
	k, ok := any(microKernel[float32]{6, 16, kern6x16}).(microKernel[T])
	return k, ok
}

func kern6x16(k int, ap, bp, c []float32, ldc int, alpha float32) {
	_ = ap[6*k-1]
	_ = bp[16*k-1]
	_ = c[5*ldc+15]
	sgemm6x16(k, &ap[0], &bp[0], &c[0], ldc, alpha)
}
