//go:build !amd64

package avx2

const noKernel = "avx2: no AVX2 kernel on this architecture (cpufeat.AVX2FMA is false)"

func Gemm4x2(a []float32, lda int, b []float32, ldb int, k, pairs int, c []float32, ldc int, alpha float32, acc bool) {
	panic(noKernel)
}

func Acc4x16(a []float32, rs, ts int, b []float32, ldb int, k, chunks int, c []float32, ldc int, alpha float32) {
	panic(noKernel)
}

func Gemm6x16(k int, ap, bp, c []float32, ldc int, alpha float32) { panic(noKernel) }

func Dot32(x, y []float32) float32 { panic(noKernel) }

func Dot4x8(p []float32, stride int, q []float32, out *[4]float32) { panic(noKernel) }

func ExpShift8(x []float32, shift float32) float32 { panic(noKernel) }
