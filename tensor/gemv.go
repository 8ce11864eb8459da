package tensor

// gemvMaxRows is the largest m for which Gemm multiplies row by row
// (gemvSmall) instead of packing: with a few rows of A the packed GEMM
// spends most of its time copying op(B) into strips it then reads once.
const gemvMaxRows = 4

// gemvSmall computes C = alpha·op(A)·op(B) + beta·C for m ≤ gemvMaxRows
// without packing, splitting the n columns of C across workers. With op(B)
// = Bᵀ every C[i,j] is a dot product of contiguous rows of A and B; with
// op(B) = B every row of C accumulates alpha·A[i,p]·B[p,:] over p. op(A)
// = Aᵀ is first gathered into rows.
func gemvSmall[T Float](cpu *CPU[T], transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if transA || k == 0 || alpha == 0 { // rows of op(A), contiguous
		rows := make([]T, m*k)
		if alpha != 0 {
			for i := range m {
				for p := range k {
					if transA {
						rows[i*k+p] = a[p*lda+i]
					} else {
						rows[i*k+p] = a[i*lda+p]
					}
				}
			}
		}
		a, lda = rows, k
	}
	dotf := dot[T]
	if f, ok := fastDot[T](); ok {
		dotf = f
	}
	// Work per column is m·k multiply-adds; give each worker at least ~32K.
	grain := max(1, (1<<15)/max(1, m*k))
	cpu.parallel(n, grain, func(lo, hi int) {
		for i := range m {
			row := c[i*ldc+lo : i*ldc+hi]
			if beta == 0 {
				clear(row)
			} else if beta != 1 {
				for j := range row {
					row[j] *= beta
				}
			}
			if alpha == 0 || k == 0 {
				continue
			}
			ai := a[i*lda : i*lda+k]
			if transB {
				for j := lo; j < hi; j++ {
					row[j-lo] += alpha * dotf(ai, b[j*ldb:j*ldb+k])
				}
				continue
			}
			for p, av := range ai {
				if av != 0 {
					axpy(alpha*av, b[p*ldb+lo:p*ldb+hi], row)
				}
			}
		}
	})
}

// dot returns Σ x[i]·y[i] (len(y) ≥ len(x)) with four partial sums.
func dot[T Float](x, y []T) T {
	y = y[:len(x)]
	var s0, s1, s2, s3 T
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy computes y += alpha·x (len(y) ≥ len(x)).
func axpy[T Float](alpha T, x, y []T) {
	y = y[:len(x)]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		y[i] += alpha * x[i]
		y[i+1] += alpha * x[i+1]
		y[i+2] += alpha * x[i+2]
		y[i+3] += alpha * x[i+3]
	}
	for ; i < len(x); i++ {
		y[i] += alpha * x[i]
	}
}
