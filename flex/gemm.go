package flex

import "dflash/internal/avx2"

// elem is the element type of the CPU kernels.
type elem interface{ float32 | float64 }

// rowGroup is the number of rows the gemm micro-kernel handles at once.
const rowGroup = 4

// span is a half-open range [lo, hi) of indices.
type span struct{ lo, hi int32 }

// gemmNT computes, for every row i < m and column j of its group's column
// span, C[i*ldc+j] = alpha * sum over t of A[i*lda+t] * B[j*ldb+t] (plus the
// old C[i*ldc+j] when acc), with t over the group's inner span. Rows are
// grouped by rowGroup: cols[g] and inner[g] give the spans of rows
// [g*rowGroup, (g+1)*rowGroup); a nil slice means the full range [0, n) or
// [0, k). Both A and B are read along contiguous rows, four rows of A by two
// of B at a time, so each loaded value feeds several multiply-adds.
func gemmNT[T elem](C []T, ldc int, A []T, lda int, B []T, ldb int, m, n, k int, cols, inner []span, alpha T, acc bool) {
	c32, a32, b32, simd := simd32(C, A, B)
	for g := 0; g*rowGroup < m; g++ {
		i0 := g * rowGroup
		rows := min(rowGroup, m-i0)
		j0, j1 := 0, n
		if cols != nil {
			j0, j1 = int(cols[g].lo), int(cols[g].hi)
		}
		t0, t1 := 0, k
		if inner != nil {
			t0, t1 = int(inner[g].lo), int(inner[g].hi)
		}
		if j0 >= j1 {
			continue
		}
		if t0 >= t1 {
			if !acc {
				for i := i0; i < i0+rows; i++ {
					clear(C[i*ldc+j0 : i*ldc+j1])
				}
			}
			continue
		}
		if rows == rowGroup && simd {
			group4x32(c32, ldc, a32, lda, b32, ldb, i0, j0, j1, t0, t1, float32(alpha), acc)
			continue
		}
		if rows == rowGroup {
			a0 := A[i0*lda+t0 : i0*lda+t1]
			a1 := A[(i0+1)*lda+t0 : (i0+1)*lda+t1]
			a2 := A[(i0+2)*lda+t0 : (i0+2)*lda+t1]
			a3 := A[(i0+3)*lda+t0 : (i0+3)*lda+t1]
			c0 := C[i0*ldc : i0*ldc+n]
			c1 := C[(i0+1)*ldc : (i0+1)*ldc+n]
			c2 := C[(i0+2)*ldc : (i0+2)*ldc+n]
			c3 := C[(i0+3)*ldc : (i0+3)*ldc+n]
			j := j0
			for ; j+1 < j1; j += 2 {
				b0 := B[j*ldb+t0 : j*ldb+t1]
				b1 := B[(j+1)*ldb+t0 : (j+1)*ldb+t1]
				s00, s01, s10, s11, s20, s21, s30, s31 := dot4x2(a0, a1, a2, a3, b0, b1)
				if acc {
					c0[j] += alpha * s00
					c0[j+1] += alpha * s01
					c1[j] += alpha * s10
					c1[j+1] += alpha * s11
					c2[j] += alpha * s20
					c2[j+1] += alpha * s21
					c3[j] += alpha * s30
					c3[j+1] += alpha * s31
				} else {
					c0[j], c0[j+1] = alpha*s00, alpha*s01
					c1[j], c1[j+1] = alpha*s10, alpha*s11
					c2[j], c2[j+1] = alpha*s20, alpha*s21
					c3[j], c3[j+1] = alpha*s30, alpha*s31
				}
			}
			if j < j1 {
				col4(C, ldc, A, lda, B, ldb, i0, j, t0, t1, alpha, acc)
			}
			continue
		}
		for i := i0; i < i0+rows; i++ {
			a := A[i*lda+t0 : i*lda+t1]
			c := C[i*ldc : i*ldc+n]
			for j := j0; j < j1; j++ {
				s := dot(a, B[j*ldb+t0:j*ldb+t1])
				if acc {
					c[j] += alpha * s
				} else {
					c[j] = alpha * s
				}
			}
		}
	}
}

// gemmAcc computes, for every row i < m and column x < N, C[i*ldc+x] +=
// alpha * Σ_t A(i, t) · B[t*ldb+x] with A(i, t) = A[i*rs + t*ts] and t over
// the inner span of i's row group (nil: [0, k)). rs = lda, ts = 1 gives
// C += A·B; rs = 1, ts = lda gives C += Aᵀ·B, so callers never transpose.
func gemmAcc[T elem](C []T, ldc int, A []T, rs, ts int, B []T, ldb int, m, N, k int, inner []span, alpha T) {
	c32, a32, b32, simd := simd32(C, A, B)
	n16 := N &^ 15
	for g := 0; g*rowGroup < m; g++ {
		i0 := g * rowGroup
		rows := min(rowGroup, m-i0)
		t0, t1 := 0, k
		if inner != nil {
			t0, t1 = int(inner[g].lo), int(inner[g].hi)
		}
		if t0 >= t1 {
			continue
		}
		x0 := 0
		if simd && rows == rowGroup && n16 > 0 {
			avx2.Acc4x16(a32[i0*rs+t0*ts:], rs, ts, b32[t0*ldb:], ldb, t1-t0, n16/16, c32[i0*ldc:], ldc, float32(alpha))
			x0 = n16
		}
		if x0 == N {
			continue
		}
		accRows(C, ldc, A, rs, ts, B, ldb, i0, i0+rows, x0, N, t0, t1, alpha)
	}
}

// accRows is the portable kernel of gemmAcc for rows [i0, i1) and columns
// [x0, x1): two rows by four columns at a time, eight accumulators over t.
func accRows[T elem](C []T, ldc int, A []T, rs, ts int, B []T, ldb int, i0, i1, x0, x1, t0, t1 int, alpha T) {
	i := i0
	for ; i+1 < i1; i += 2 {
		c0, c1 := C[i*ldc:i*ldc+x1], C[(i+1)*ldc:(i+1)*ldc+x1]
		x := x0
		for ; x+3 < x1; x += 4 {
			var s00, s01, s02, s03, s10, s11, s12, s13 T
			ai, bi := i*rs+t0*ts, t0*ldb+x
			for t := t0; t < t1; t++ {
				a0, a1 := A[ai], A[ai+rs]
				b := B[bi : bi+4 : bi+4]
				b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
				s00 += a0 * b0
				s01 += a0 * b1
				s02 += a0 * b2
				s03 += a0 * b3
				s10 += a1 * b0
				s11 += a1 * b1
				s12 += a1 * b2
				s13 += a1 * b3
				ai += ts
				bi += ldb
			}
			c0[x] += alpha * s00
			c0[x+1] += alpha * s01
			c0[x+2] += alpha * s02
			c0[x+3] += alpha * s03
			c1[x] += alpha * s10
			c1[x+1] += alpha * s11
			c1[x+2] += alpha * s12
			c1[x+3] += alpha * s13
		}
		for ; x < x1; x++ {
			var s0, s1 T
			for t := t0; t < t1; t++ {
				b := B[t*ldb+x]
				s0 += A[i*rs+t*ts] * b
				s1 += A[(i+1)*rs+t*ts] * b
			}
			c0[x] += alpha * s0
			c1[x] += alpha * s1
		}
	}
	if i < i1 {
		c := C[i*ldc : i*ldc+x1]
		for x := x0; x < x1; x++ {
			var s T
			for t := t0; t < t1; t++ {
				s += A[i*rs+t*ts] * B[t*ldb+x]
			}
			c[x] += alpha * s
		}
	}
}

// group4x32 is the float32 4-row group of gemmNT with the AVX2/FMA kernel
// (column pairs) and col4 for an odd last column.
func group4x32(C []float32, ldc int, A []float32, lda int, B []float32, ldb int, i0, j0, j1, t0, t1 int, alpha float32, acc bool) {
	pairs := (j1 - j0) / 2
	if pairs > 0 {
		avx2.Gemm4x2(A[i0*lda+t0:], lda, B[j0*ldb+t0:], ldb, t1-t0, pairs, C[i0*ldc+j0:], ldc, alpha, acc)
	}
	if j := j0 + 2*pairs; j < j1 {
		col4(C, ldc, A, lda, B, ldb, i0, j, t0, t1, alpha, acc)
	}
}

// col4 computes column j of the 4-row group at row i0 of gemmNT:
// C[i*ldc+j] = alpha * A_i·B_j over [t0, t1) (plus the old value when acc).
func col4[T elem](C []T, ldc int, A []T, lda int, B []T, ldb int, i0, j, t0, t1 int, alpha T, acc bool) {
	s0, s1, s2, s3 := dot4x1(A[i0*lda+t0:i0*lda+t1], A[(i0+1)*lda+t0:(i0+1)*lda+t1],
		A[(i0+2)*lda+t0:(i0+2)*lda+t1], A[(i0+3)*lda+t0:(i0+3)*lda+t1], B[j*ldb+t0:j*ldb+t1])
	for r, s := range [4]T{s0, s1, s2, s3} {
		if acc {
			C[(i0+r)*ldc+j] += alpha * s
		} else {
			C[(i0+r)*ldc+j] = alpha * s
		}
	}
}

// simd32 returns C, A and B as float32 slices and true when T is float32
// and the AVX2/FMA kernels are in use.
func simd32[T elem](C, A, B []T) (c, a, b []float32, ok bool) {
	if !hasAVX2FMA {
		return nil, nil, nil, false
	}
	c, ok = any(C).([]float32)
	a, _ = any(A).([]float32)
	b, _ = any(B).([]float32)
	return c, a, b, ok
}

// dot4x2 returns the eight dot products of a0..a3 with b0 and b1.
func dot4x2[T elem](a0, a1, a2, a3, b0, b1 []T) (s00, s01, s10, s11, s20, s21, s30, s31 T) {
	n := len(a0)
	a1, a2, a3, b0, b1 = a1[:n], a2[:n], a3[:n], b0[:n], b1[:n]
	for t := 0; t < n; t++ {
		x0, x1, x2, x3 := a0[t], a1[t], a2[t], a3[t]
		y0, y1 := b0[t], b1[t]
		s00 += x0 * y0
		s01 += x0 * y1
		s10 += x1 * y0
		s11 += x1 * y1
		s20 += x2 * y0
		s21 += x2 * y1
		s30 += x3 * y0
		s31 += x3 * y1
	}
	return
}

// dot4x1 returns the dot products of a0..a3 with b.
func dot4x1[T elem](a0, a1, a2, a3, b []T) (s0, s1, s2, s3 T) {
	n := len(a0)
	a1, a2, a3, b = a1[:n], a2[:n], a3[:n], b[:n]
	for t := 0; t < n; t++ {
		y := b[t]
		s0 += a0[t] * y
		s1 += a1[t] * y
		s2 += a2[t] * y
		s3 += a3[t] * y
	}
	return
}

// dot returns a·b, with four partial sums.
func dot[T elem](a, b []T) T {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 T
	t := 0
	for ; t+3 < n; t += 4 {
		s0 += a[t] * b[t]
		s1 += a[t+1] * b[t+1]
		s2 += a[t+2] * b[t+2]
		s3 += a[t+3] * b[t+3]
	}
	for ; t < n; t++ {
		s0 += a[t] * b[t]
	}
	return (s0 + s1) + (s2 + s3)
}
