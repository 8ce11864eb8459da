package tensor

import (
	"fmt"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// GemmPath selects how the CPU backend multiplies matrices.
type GemmPath int

const (
	// GemmAuto multiplies products of at most 4 rows, and x·Wᵀ products of
	// at most 16, without packing (matrix–vector style, several dot
	// products per SIMD call) and picks, once, for the rest the fastest path
	// this machine has: the packed
	// GEMM with the AVX2/FMA micro-kernel for float32 on amd64 CPUs that have
	// it; else gonum's Sgemm for float32 (faster than the portable kernel
	// where there is no SIMD kernel of ours); the portable packed GEMM for float64.
	GemmAuto GemmPath = iota
	// GemmPortable is the packed GEMM with the pure-Go 3×4 micro-kernel.
	GemmPortable
	// GemmGonum calls gonum's blas32.Gemm for float32 (float64 stays portable).
	GemmGonum
)

// Gemm computes C = alpha·op(A)·op(B) + beta·C.
func (c *CPU[T]) Gemm(transA bool, transB bool, m int, n int, k int, alpha T, aS Storage[T], lda int, bS Storage[T], ldb int, beta T, ccS Storage[T], ldc int) {
	a := HostData(aS, "Gemm a")
	b := HostData(bS, "Gemm b")
	cc := HostData(ccS, "Gemm cc")
	fast, hasFast := fastKernel[T]()
	path := c.gemm
	if path == GemmAuto && useGemv(transB, m) {
		gemvSmall(c, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc)
		return
	}
	if path == GemmAuto {
		path = GemmGonum
		if hasFast {
			gemm(c, fast, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc)
			return
		}
	}
	if path == GemmGonum {
		if a32, ok := any(a).([]float32); ok {
			checkGemm(transA, transB, m, n, k, a, lda, b, ldb, cc, ldc)
			gonumSgemm(transA, transB, m, n, k, float32(alpha), a32, lda, any(b).([]float32), ldb, float32(beta), any(cc).([]float32), ldc)
			return
		}
	}
	gemm(c, genericKernel[T](), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc)
}

// GemmAdd computes D = alpha·op(A)·op(B) + C: C is copied into D (unless
// they are one) and the product is added there.
func (c *CPU[T]) GemmAdd(transA, transB bool, m, n, k int, alpha T, aS Storage[T], lda int, bS Storage[T], ldb int, cS, dS Storage[T], ldc int) {
	cc := HostData(cS, "GemmAdd c")
	d := HostData(dS, "GemmAdd d")
	if m > 0 && n > 0 {
		if ldc < n || (m-1)*ldc+n > len(cc) {
			panic(fmt.Sprintf("tensor: GemmAdd: C is %d×%d with leading dimension %d but has %d elements", m, n, ldc, len(cc)))
		}
		if &cc[0] != &d[0] {
			c.parallel(m, 1<<14/n+1, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					copy(d[i*ldc:i*ldc+n], cc[i*ldc:i*ldc+n])
				}
			})
		}
	}
	c.Gemm(transA, transB, m, n, k, alpha, aS, lda, bS, ldb, 1, dS, ldc)
}

func gonumSgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if beta == 0 { // C's old contents (even NaN) must not matter
		for i := range m {
			clear(c[i*ldc : i*ldc+n])
		}
	}
	if k == 0 || alpha == 0 {
		if beta != 0 && beta != 1 {
			for i := range m {
				for j := range n {
					c[i*ldc+j] *= beta
				}
			}
		}
		return
	}
	ar, ac, br, bc := GemmOperands(transA, transB, m, n, k)
	ta, tb := blas.NoTrans, blas.NoTrans
	if transA {
		ta = blas.Trans
	}
	if transB {
		tb = blas.Trans
	}
	blas32.Gemm(ta, tb, alpha,
		blas32.General{Rows: ar, Cols: ac, Stride: lda, Data: a[:(ar-1)*lda+ac]},
		blas32.General{Rows: br, Cols: bc, Stride: ldb, Data: b[:(br-1)*ldb+bc]},
		beta, blas32.General{Rows: m, Cols: n, Stride: ldc, Data: c[:(m-1)*ldc+n]})
}
