package tensor

import (
	"fmt"
	"sync"
)

// Blocking of the packed GEMM (Goto's algorithm): C is computed in nc-wide
// column panels; for each kc-deep slice of k a panel of op(B) is packed once
// into nr-wide strips shared by all workers, and each worker packs an mc×kc
// block of op(A) into mr-tall strips and runs the mr×nr micro-kernel over it.
const (
	gemmKC = 256
	gemmMC = 96
	gemmNC = 1024
)

// microKernel computes C[0:mr, 0:nr] += alpha·Σ_p ap[p·mr+i]·bp[p·nr+j] for a
// packed mr-strip of A and nr-strip of B of depth k; C has leading dimension ldc.
type microKernel[T Float] struct {
	mr, nr int
	fn     func(k int, ap, bp, c []T, ldc int, alpha T)
}

// genericKernel is the portable 3×4 micro-kernel (twelve accumulators fit the
// registers the Go compiler has for floats without spilling).
func genericKernel[T Float]() microKernel[T] { return microKernel[T]{3, 4, kern3x4[T]} }

func kern3x4[T Float](k int, ap, bp, c []T, ldc int, alpha T) {
	var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23 T
	ap = ap[:3*k]
	bp = bp[:4*k]
	for l := 0; l < k; l++ {
		a := ap[3*l : 3*l+3 : 3*l+3]
		b := bp[4*l : 4*l+4 : 4*l+4]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		a0 := a[0]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		a1 := a[1]
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		a2 := a[2]
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
	}
	r := c[0:4:4]
	r[0] += alpha * c00
	r[1] += alpha * c01
	r[2] += alpha * c02
	r[3] += alpha * c03
	r = c[ldc : ldc+4 : ldc+4]
	r[0] += alpha * c10
	r[1] += alpha * c11
	r[2] += alpha * c12
	r[3] += alpha * c13
	r = c[2*ldc : 2*ldc+4 : 2*ldc+4]
	r[0] += alpha * c20
	r[1] += alpha * c21
	r[2] += alpha * c22
	r[3] += alpha * c23
}

var packPools sync.Map // element size → *sync.Pool of *[]T

func getBuf[T Float](n int) *[]T {
	var z T
	key := any(z)
	p, _ := packPools.LoadOrStore(key, &sync.Pool{})
	if v := p.(*sync.Pool).Get(); v != nil {
		b := v.(*[]T)
		if cap(*b) >= n {
			*b = (*b)[:n]
			return b
		}
	}
	b := make([]T, n)
	return &b
}

func putBuf[T Float](b *[]T) {
	var z T
	p, _ := packPools.Load(any(z))
	p.(*sync.Pool).Put(b)
}

// GemmOperands returns the stored shapes of A (ar×ac) and B (br×bc) of the
// product op(A)·op(B) with op(A) m×k and op(B) k×n: A is k×m when transA, B
// is n×k when transB.
func GemmOperands(transA, transB bool, m, n, k int) (ar, ac, br, bc int) {
	ar, ac, br, bc = m, k, k, n
	if transA {
		ar, ac = k, m
	}
	if transB {
		br, bc = n, k
	}
	return ar, ac, br, bc
}

func checkGemm[T Float](transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) {
	ar, ac, br, bc := GemmOperands(transA, transB, m, n, k)
	bad := func(what string, rows, cols, ld, length int) {
		if rows == 0 || cols == 0 {
			return
		}
		if ld < cols || (rows-1)*ld+cols > length {
			panic(fmt.Sprintf("tensor: Gemm(transA=%v, transB=%v, m=%d, n=%d, k=%d): %s is %d×%d with leading dimension %d but has %d elements",
				transA, transB, m, n, k, what, rows, cols, ld, length))
		}
	}
	bad("A", ar, ac, lda, len(a))
	bad("B", br, bc, ldb, len(b))
	bad("C", m, n, ldc, len(c))
}

func gemm[T Float](cpu *CPU[T], kern microKernel[T], transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if beta != 1 {
		cpu.parallel(m, 1<<14/n+1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row := c[i*ldc : i*ldc+n]
				if beta == 0 {
					clear(row)
				} else {
					for j := range row {
						row[j] *= beta
					}
				}
			}
		})
	}
	if alpha == 0 || k == 0 {
		return
	}
	mr, nr := kern.mr, kern.nr
	workers := cpu.workers
	// Row blocks: at most gemmMC rows, and enough blocks to feed every worker.
	mc := min(gemmMC, roundUp((m+workers-1)/workers, mr))
	mBlocks := (m + mc - 1) / mc
	bufB := getBuf[T](gemmKC * roundUp(min(n, gemmNC), nr))
	defer putBuf(bufB)
	bp := *bufB
	for jc := 0; jc < n; jc += gemmNC {
		nc := min(gemmNC, n-jc)
		strips := (nc + nr - 1) / nr
		// Split column strips too when there are fewer row blocks than workers.
		nSplit := max(1, min(strips, workers/mBlocks))
		for pc := 0; pc < k; pc += gemmKC {
			kc := min(gemmKC, k-pc)
			cpu.parallel(strips, 8, func(lo, hi int) {
				for s := lo; s < hi; s++ {
					packB(transB, b, ldb, pc, kc, jc+s*nr, min(nr, n-jc-s*nr), nr, bp[s*kc*nr:(s+1)*kc*nr])
				}
			})
			cpu.parallel(mBlocks*nSplit, 1, func(lo, hi int) {
				bufA := getBuf[T](mc * kc)
				defer putBuf(bufA)
				ap := *bufA
				tmp := make([]T, mr*nr)
				for task := lo; task < hi; task++ {
					ib, part := task/nSplit, task%nSplit
					ic := ib * mc
					rows := min(mc, m-ic)
					aStrips := (rows + mr - 1) / mr
					for s := range aStrips {
						packA(transA, a, lda, ic+s*mr, min(mr, m-ic-s*mr), pc, kc, mr, ap[s*kc*mr:(s+1)*kc*mr])
					}
					for js := part * strips / nSplit; js < (part+1)*strips/nSplit; js++ {
						j0 := jc + js*nr
						cols := min(nr, n-j0)
						bs := bp[js*kc*nr : (js+1)*kc*nr]
						for s := range aStrips {
							i0 := ic + s*mr
							mrows := min(mr, m-i0)
							as := ap[s*kc*mr : (s+1)*kc*mr]
							if mrows == mr && cols == nr {
								kern.fn(kc, as, bs, c[i0*ldc+j0:], ldc, alpha)
								continue
							}
							clear(tmp)
							kern.fn(kc, as, bs, tmp, nr, alpha)
							for i := range mrows {
								row := c[(i0+i)*ldc+j0 : (i0+i)*ldc+j0+cols]
								for j := range row {
									row[j] += tmp[i*nr+j]
								}
							}
						}
					}
				}
			})
		}
	}
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// packA packs rows [i0, i0+rows) and columns [p0, p0+kc) of op(A) into dst as
// dst[p·mr+i], zero-padding rows beyond rows.
func packA[T Float](trans bool, a []T, lda, i0, rows, p0, kc, mr int, dst []T) {
	if rows < mr {
		clear(dst)
	}
	if trans { // op(A)[i][p] = a[p·lda+i]
		for p := range kc {
			src := a[(p0+p)*lda+i0 : (p0+p)*lda+i0+rows]
			copy(dst[p*mr:p*mr+rows], src)
		}
		return
	}
	for i := range rows {
		src := a[(i0+i)*lda+p0 : (i0+i)*lda+p0+kc]
		for p, v := range src {
			dst[p*mr+i] = v
		}
	}
}

// packB packs rows [p0, p0+kc) and columns [j0, j0+cols) of op(B) into dst as
// dst[p·nr+j], zero-padding columns beyond cols.
func packB[T Float](trans bool, b []T, ldb, p0, kc, j0, cols, nr int, dst []T) {
	if cols < nr {
		clear(dst)
	}
	if !trans { // op(B)[p][j] = b[p·ldb+j]
		for p := range kc {
			copy(dst[p*nr:p*nr+cols], b[(p0+p)*ldb+j0:(p0+p)*ldb+j0+cols])
		}
		return
	}
	for j := range cols { // op(B)[p][j] = b[j·ldb+p]
		src := b[(j0+j)*ldb+p0 : (j0+j)*ldb+p0+kc]
		for p, v := range src {
			dst[p*nr+j] = v
		}
	}
}
