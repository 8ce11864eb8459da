package avx2

import (
	"math"
	"math/rand/v2"
	"testing"

	"dflash/internal/cpufeat"
	"dflash/internal/testseed"
)

// Each kernel is checked against float64 sums of the same float32 inputs,
// drawn fresh (testseed), over lengths and strides around its vector
// widths.

func needAVX2(t *testing.T) *rand.Rand {
	if !cpufeat.AVX2FMA {
		t.Skip("no AVX2/FMA (or DFLASH_NOASM set): the callers' portable kernels run")
	}
	return testseed.New(t)
}

func randf(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// close reports whether got is within the float32 rounding of a sum of k
// products of unit normals around want.
func close(got float32, want float64, k int) bool {
	return math.Abs(float64(got)-want) <= 1e-5*(1+math.Abs(want))*math.Sqrt(float64(k))
}

// TestGemm4x2 checks Gemm4x2 for every length from 1 to 70, several
// strides, both alpha and accumulate, and that it leaves the columns past
// 2·pairs alone.
func TestGemm4x2(t *testing.T) {
	r := needAVX2(t)
	for k := 1; k <= 70; k++ {
		for _, acc := range []bool{false, true} {
			lda, ldb, pairs := k+r.IntN(5), k+r.IntN(5), 1+r.IntN(5)
			ldc := 2*pairs + r.IntN(3)
			a, b, c := randf(r, 3*lda+k), randf(r, (2*pairs-1)*ldb+k), randf(r, 3*ldc+2*pairs)
			old := append([]float32(nil), c...)
			alpha := float32(r.NormFloat64())
			Gemm4x2(a, lda, b, ldb, k, pairs, c, ldc, alpha, acc)
			for i := 0; i < 4; i++ {
				for j := 0; j < ldc && i*ldc+j < len(c); j++ {
					want := float64(old[i*ldc+j])
					if j < 2*pairs {
						s := 0.0
						for x := 0; x < k; x++ {
							s += float64(a[i*lda+x]) * float64(b[j*ldb+x])
						}
						s *= float64(alpha)
						if acc {
							want += s
						} else {
							want = s
						}
					}
					if !close(c[i*ldc+j], want, k) {
						t.Fatalf("k %d acc %v row %d col %d (pairs %d): %v, want %v", k, acc, i, j, pairs, c[i*ldc+j], want)
					}
				}
			}
		}
	}
}

// TestAcc4x16 checks Acc4x16 in both layouts (A and Aᵀ) for k from 1 to 40
// and one to three chunks of 16 columns.
func TestAcc4x16(t *testing.T) {
	r := needAVX2(t)
	for k := 1; k <= 40; k++ {
		for _, trans := range []bool{false, true} {
			chunks := 1 + r.IntN(3)
			lda := k + r.IntN(3)
			rs, ts, arows := lda, 1, 4
			if trans {
				lda = 4 + r.IntN(3)
				rs, ts, arows = 1, lda, k
			}
			ldb, ldc := 16*chunks+r.IntN(3), 16*chunks+r.IntN(3)
			a, b, c := randf(r, arows*lda), randf(r, k*ldb), randf(r, 4*ldc)
			old := append([]float32(nil), c...)
			alpha := float32(r.NormFloat64())
			Acc4x16(a, rs, ts, b, ldb, k, chunks, c, ldc, alpha)
			for i := 0; i < 4; i++ {
				for x := 0; x < ldc; x++ {
					want := float64(old[i*ldc+x])
					if x < 16*chunks {
						s := 0.0
						for p := 0; p < k; p++ {
							s += float64(a[i*rs+p*ts]) * float64(b[p*ldb+x])
						}
						want += float64(alpha) * s
					}
					if !close(c[i*ldc+x], want, k) {
						t.Fatalf("k %d trans %v: C[%d,%d] = %v, want %v", k, trans, i, x, c[i*ldc+x], want)
					}
				}
			}
		}
	}
}

// TestGemm6x16 checks the packed micro-kernel for k from 1 to 40.
func TestGemm6x16(t *testing.T) {
	r := needAVX2(t)
	for k := 1; k <= 40; k++ {
		ldc := 16 + r.IntN(3)
		ap, bp, c := randf(r, 6*k), randf(r, 16*k), randf(r, 5*ldc+16)
		old := append([]float32(nil), c...)
		alpha := float32(r.NormFloat64())
		Gemm6x16(k, ap, bp, c, ldc, alpha)
		for i := 0; i < 6; i++ {
			for j := 0; j < ldc && i*ldc+j < len(c); j++ {
				want := float64(old[i*ldc+j])
				if j < 16 {
					s := 0.0
					for p := 0; p < k; p++ {
						s += float64(ap[6*p+i]) * float64(bp[16*p+j])
					}
					want += float64(alpha) * s
				}
				if !close(c[i*ldc+j], want, k) {
					t.Fatalf("k %d: C[%d,%d] = %v, want %v", k, i, j, c[i*ldc+j], want)
				}
			}
		}
	}
}

// TestDot32 checks Dot32 for lengths 32 to 320.
func TestDot32(t *testing.T) {
	r := needAVX2(t)
	for n := 32; n <= 320; n += 32 {
		x, y := randf(r, n), randf(r, n+r.IntN(3))
		want := 0.0
		for i := range x {
			want += float64(x[i]) * float64(y[i])
		}
		if got := Dot32(x, y); !close(got, want, n) {
			t.Fatalf("n %d: %v, want %v", n, got, want)
		}
	}
}

// TestDot4x8 checks Dot4x8 for lengths 8 to 200 (both its 16- and 8-wide
// steps) and several strides.
func TestDot4x8(t *testing.T) {
	r := needAVX2(t)
	for k := 8; k <= 200; k += 8 {
		stride := k + r.IntN(5)
		p, q := randf(r, 3*stride+k), randf(r, k)
		var out [4]float32
		Dot4x8(p, stride, q, &out)
		for row, got := range out {
			want := 0.0
			for i := range q {
				want += float64(p[row*stride+i]) * float64(q[i])
			}
			if !close(got, want, k) {
				t.Fatalf("k %d row %d: %v, want %v", k, row, got, want)
			}
		}
	}
}

// TestExpShift8 checks the vectorised exponential against math.Exp,
// including -Inf and arguments below the underflow threshold, and its sum.
func TestExpShift8(t *testing.T) {
	r := needAVX2(t)
	for n := 0; n < 72; n += 8 {
		x := make([]float32, n)
		for i := range x {
			switch r.IntN(6) {
			case 0:
				x[i] = float32(math.Inf(-1))
			case 1:
				x[i] = -90 - float32(r.Float64()*10)
			default:
				x[i] = float32(r.Float64()*170 - 85)
			}
		}
		in := append([]float32(nil), x...)
		shift := float32(r.NormFloat64())
		sum := ExpShift8(x, shift)
		want := 0.0
		for i := range x {
			e := math.Exp(min(float64(in[i]-shift), 88)) // arguments are clamped at 88
			if float64(in[i]-shift) < -87.3 {
				e = 0
			}
			want += float64(x[i])
			if math.Abs(float64(x[i])-e) > 3e-7*e {
				t.Fatalf("n %d: exp(%v - %v) = %v, want %v", n, in[i], shift, x[i], e)
			}
		}
		if math.Abs(float64(sum)-want) > 1e-6*want {
			t.Fatalf("n %d: sum %v, want %v", n, sum, want)
		}
	}
}
