//go:build amd64

package avx2

//go:noescape
func sgemm4x2(a *float32, lda int, b *float32, ldb int, k int, pairs int, c *float32, ldc int, alpha float32, acc bool)

// Gemm4x2 computes C[i, j] = alpha·a_i·b_j (+ C[i, j] when acc) for the 4
// rows a_i of a (stride lda) and the 2·pairs rows b_j of b (stride ldb),
// over k ≥ 1 elements; C row i starts at c[i·ldc].
func Gemm4x2(a []float32, lda int, b []float32, ldb int, k, pairs int, c []float32, ldc int, alpha float32, acc bool) {
	_ = a[3*lda+k-1]
	_ = b[(2*pairs-1)*ldb+k-1]
	_ = c[3*ldc+2*pairs-1]
	sgemm4x2(&a[0], lda, &b[0], ldb, k, pairs, &c[0], ldc, alpha, acc)
}

//go:noescape
func sgemm4x16(k int, a *float32, rs, ts int, b *float32, ldb int, c *float32, ldc int, alpha float32)

// Acc4x16 adds alpha·Σ_t A(r, t)·B[t, x] to C[r, x] for r < 4 and the
// columns x < 16·chunks, with A(r, t) = a[r·rs + t·ts], over k ≥ 1 terms:
// rs = lda, ts = 1 is A·B, rs = 1, ts = lda is Aᵀ·B.
func Acc4x16(a []float32, rs, ts int, b []float32, ldb int, k, chunks int, c []float32, ldc int, alpha float32) {
	_ = a[3*rs+(k-1)*ts]
	_ = b[(k-1)*ldb+16*chunks-1]
	_ = c[3*ldc+16*chunks-1]
	for x := 0; x < chunks; x++ {
		sgemm4x16(k, &a[0], rs, ts, &b[16*x], ldb, &c[16*x], ldc, alpha)
	}
}

//go:noescape
func sgemm6x16(k int, ap, bp, c *float32, ldc int, alpha float32)

// Gemm6x16 adds alpha·Σ_p ap[6p+i]·bp[16p+j] to C[i, j] = c[i·ldc+j] for
// i < 6, j < 16, over k ≥ 1 terms: the packed GEMM's micro-kernel (ap holds 6
// rows of A, bp 16 columns of B, both packed by p).
func Gemm6x16(k int, ap, bp, c []float32, ldc int, alpha float32) {
	_ = ap[6*k-1]
	_ = bp[16*k-1]
	_ = c[5*ldc+15]
	sgemm6x16(k, &ap[0], &bp[0], &c[0], ldc, alpha)
}

//go:noescape
func sdot32(n int, x, y *float32) float32

// Dot32 returns Σ x[i]·y[i] for len(x) a positive multiple of 32
// (len(y) ≥ len(x)).
func Dot32(x, y []float32) float32 {
	if len(x) == 0 || len(x)%32 != 0 {
		panic("avx2: Dot32 of a length that is not a positive multiple of 32")
	}
	_ = y[len(x)-1]
	return sdot32(len(x), &x[0], &y[0])
}

//go:noescape
func sdot4x8(n int, p *float32, stride int, q *float32, out *float32)

// Dot4x8 sets out[r] = Σ_i p[r·stride+i]·q[i] for the 4 rows r of p, over
// len(q), a positive multiple of 8.
func Dot4x8(p []float32, stride int, q []float32, out *[4]float32) {
	k := len(q)
	if k == 0 || k%8 != 0 {
		panic("avx2: Dot4x8 of a length that is not a positive multiple of 8")
	}
	_ = p[3*stride+k-1]
	sdot4x8(k, &p[0], stride, &q[0], &out[0])
}

//go:noescape
func vexp32(x *float32, n int, shift float32) (sum float32)

// ExpShift8 sets x[i] = exp(x[i] - shift) and returns their sum, for
// len(x) a multiple of 8. Arguments below -87.3 (-Inf too) give exactly 0,
// arguments are clamped at 88; the relative error is below 3e-7.
func ExpShift8(x []float32, shift float32) float32 {
	if len(x)%8 != 0 {
		panic("avx2: ExpShift8 of a length that is not a multiple of 8")
	}
	if len(x) == 0 {
		return 0
	}
	return vexp32(&x[0], len(x), shift)
}
