package tensor

// gemvMaxRows is the largest m for which Gemm multiplies row by row
// (gemvSmall) instead of packing: with a few rows of A the packed GEMM
// spends most of its time copying op(B) into strips it then reads once.
// With op(B) = Bᵀ (a linear layer's x·Wᵀ) the limit is gemvMaxRowsNT: each
// row of B is read once from memory for all m dot products, which beats
// packing up to about 16 rows (docs/PERF.md, speculative decoding).
const (
	gemvMaxRows   = 4
	gemvMaxRowsNT = 16
)

// gemvGrain is the fewest multiply-adds gemvSmall hands to one goroutine:
// about 20 µs of work. A decode step's or a verification's products (1 to
// 8 rows against a weight of 128×384) take less than starting and joining
// a goroutine costs, and on a loaded machine a join waits for the OS to
// schedule the other thread (docs/PERF.md, speculative decoding).
const gemvGrain = 1 << 19

// gemvBlock is the number of values of B (128 KB of float32) that gemvNT
// multiplies by every group of rows of A before moving on: they stay in
// the core's L2 cache between groups.
const gemvBlock = 1 << 15

// useGemv reports whether Gemm takes gemvSmall for these operands.
func useGemv(transB bool, m int) bool {
	return m <= gemvMaxRows || transB && m <= gemvMaxRowsNT
}

// gemvSmall computes C = alpha·op(A)·op(B) + beta·C for few rows (useGemv)
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
	// Work per column is m·k multiply-adds; give each worker at least
	// gemvGrain of them.
	grain := max(1, gemvGrain/max(1, m*k))
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
		}
		if alpha == 0 || k == 0 {
			return
		}
		if transB {
			gemvNT(m, lo, hi, k, alpha, a, lda, b, ldb, c, ldc, dotf)
			return
		}
		for i := range m {
			row := c[i*ldc+lo : i*ldc+hi]
			ai := a[i*lda : i*lda+k]
			for p, av := range ai {
				if av != 0 {
					axpy(alpha*av, b[p*ldb+lo:p*ldb+hi], row)
				}
			}
		}
	})
}

// gemvNT computes columns [lo, hi) of C += alpha·A·Bᵀ for m rows of A:
// groups of four rows of A through gemv4 (every row of B read once for the
// four), the other rows one at a time through dot4 (four rows of B per call).
func gemvNT[T Float](m, lo, hi, k int, alpha T, a []T, lda int, b []T, ldb int, c []T, ldc int, dotf func(x, y []T) T) {
	d4, g4 := dot4[T], gemv4[T]
	if f, ok := fastDot4[T](); ok {
		d4 = f
	}
	if f, ok := fastGemv4[T](); ok {
		g4 = f
	}
	i := 0
	if m >= 4 {
		// Columns in blocks of about gemvBlock values of B, so that a large
		// B is read from memory once for all groups of rows, not per group.
		cb := max(2, gemvBlock/max(1, k)) &^ 1
		buf := getBuf[T](4 * min(cb, hi-lo))
		defer putBuf(buf)
		tmp := *buf
		for j0 := lo; j0 < hi; j0 += cb {
			w := min(cb, hi-j0)
			for i = 0; i+4 <= m; i += 4 {
				g4(k, a[i*lda:], lda, b[j0*ldb:], ldb, w, tmp, w)
				for r := range 4 {
					row := c[(i+r)*ldc+j0 : (i+r)*ldc+j0+w]
					for j, v := range tmp[r*w : (r+1)*w] {
						row[j] += alpha * v
					}
				}
			}
		}
	}
	var out [4]T
	for ; i < m; i++ {
		ai, ci := a[i*lda:i*lda+k], c[i*ldc:]
		j := lo
		for ; j+4 <= hi; j += 4 {
			d4(b[j*ldb:], ldb, ai, &out)
			for r, v := range out {
				ci[j+r] += alpha * v
			}
		}
		for ; j < hi; j++ {
			ci[j] += alpha * dotf(ai, b[j*ldb:j*ldb+k])
		}
	}
}

// gemv4 sets c[r·ldc+j] = Σ_i a[r·lda+i]·b[j·ldb+i] for r = 0..3 and j < n
// (i < k): four rows of A against n rows of B.
func gemv4[T Float](k int, a []T, lda int, b []T, ldb, n int, c []T, ldc int) {
	var out [4]T
	for j := range n {
		dot4(a, lda, b[j*ldb:j*ldb+k], &out)
		for r, v := range out {
			c[r*ldc+j] = v
		}
	}
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

// dot4 sets out[r] = Σ_i p[r·stride+i]·q[i] for r = 0..3 (i < len(q)): four
// dot products that share q, so that a SIMD kernel loads q once for all four.
func dot4[T Float](p []T, stride int, q []T, out *[4]T) {
	for r := range out {
		out[r] = dot(q, p[r*stride:])
	}
}
