//go:build amd64

package flex

import "dflash/internal/cpufeat"

//go:noescape
func sgemm4x2(a *float32, lda int, b *float32, ldb int, k int, pairs int, c *float32, ldc int, alpha float32, acc bool)

//go:noescape
func vexp32(x *float32, n int, shift float32) (sum float32)

// expShift32 sets x[i] = exp(x[i] - shift) and returns the sum, using the
// AVX2/FMA kernel for the multiple-of-8 head and exp32 for the rest.
func expShift32(x []float32, shift float32) float32 {
	n8 := len(x) &^ 7
	var sum float32
	if n8 > 0 {
		sum = vexp32(&x[0], n8, shift)
	}
	for i := n8; i < len(x); i++ {
		x[i] = exp32(x[i] - shift)
		sum += x[i]
	}
	return sum
}

//go:noescape
func sgemm4x16(k int, a *float32, rs, ts int, b *float32, ldb int, c *float32, ldc int, alpha float32)

// acc4x16N32 adds alpha·Σ_t A(r, t)·B[t, x] to C[r, x] for r < 4 and the
// columns x < 16*chunks, with A(r, t) = a[r*rs + t*ts], over k >= 1 terms,
// with the AVX2/FMA kernel.
func acc4x16N32(a []float32, rs, ts int, b []float32, ldb int, k, chunks int, c []float32, ldc int, alpha float32) {
	_ = a[3*rs+(k-1)*ts]
	_ = b[(k-1)*ldb+16*chunks-1]
	_ = c[3*ldc+16*chunks-1]
	for x := 0; x < chunks; x++ {
		sgemm4x16(k, &a[0], rs, ts, &b[16*x], ldb, &c[16*x], ldc, alpha)
	}
}

// hasAVX2FMA selects the AVX2/FMA kernels (see package cpufeat).
var hasAVX2FMA = cpufeat.AVX2FMA

// gemm4x2N32 computes C[i, j] = alpha * a_i·b_j (+ C[i, j] when acc) for
// the 4 rows of a (stride lda) and the 2*pairs rows of b (stride ldb), over
// k >= 1 elements, with the AVX2/FMA kernel; C row i starts at c[i*ldc].
func gemm4x2N32(a []float32, lda int, b []float32, ldb int, k, pairs int, c []float32, ldc int, alpha float32, acc bool) {
	_ = a[3*lda+k-1]
	_ = b[(2*pairs-1)*ldb+k-1]
	_ = c[3*ldc+2*pairs-1]
	sgemm4x2(&a[0], lda, &b[0], ldb, k, pairs, &c[0], ldc, alpha, acc)
}
