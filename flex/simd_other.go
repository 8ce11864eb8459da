//go:build !amd64

package flex

var hasAVX2FMA = false

func gemm4x2N32(a []float32, lda int, b []float32, ldb int, k, pairs int, c []float32, ldc int, alpha float32, acc bool) {
	panic("flex: no SIMD kernel on this architecture")
}

func expShift32(x []float32, shift float32) float32 {
	panic("flex: no SIMD kernel on this architecture")
}

func acc4x16N32(a []float32, rs, ts int, b []float32, ldb int, k, chunks int, c []float32, ldc int, alpha float32) {
	panic("flex: no SIMD kernel on this architecture")
}
