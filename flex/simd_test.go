package flex

import (
	"math"
	"testing"
)

// TestSIMDGemm checks the AVX2/FMA kernel against float64 dot products for
// every length from 1 to 70, several strides, both alpha and accumulate.
func TestSIMDGemm(t *testing.T) {
	if !hasAVX2FMA {
		t.Skip("no AVX2/FMA (or DFLASH_NOASM set): the pure-Go kernels are used")
	}
	r := newRand(t)
	for k := 1; k <= 70; k++ {
		for _, acc := range []bool{false, true} {
			lda, ldb, pairs := k+r.IntN(5), k+r.IntN(5), 1+r.IntN(5)
			ldc := 2*pairs + r.IntN(3)
			a := to32(randSlice(r, 3*lda+k))
			b := to32(randSlice(r, (2*pairs-1)*ldb+k))
			c := to32(randSlice(r, 3*ldc+2*pairs))
			old := append([]float32(nil), c...)
			alpha := float32(r.NormFloat64())
			gemm4x2N32(a, lda, b, ldb, k, pairs, c, ldc, alpha, acc)
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
					if got := float64(c[i*ldc+j]); math.Abs(got-want) > 1e-5*(1+math.Abs(want))*math.Sqrt(float64(k)) {
						t.Fatalf("k %d acc %v row %d col %d (pairs %d): %v, want %v", k, acc, i, j, pairs, got, want)
					}
				}
			}
		}
	}
}

// TestExp32 checks the float32 exponential against math.Exp.
func TestExp32(t *testing.T) {
	worst := 0.0
	for x := float32(-87.29); x < 88.7; x += 0.0137 {
		got, want := float64(exp32(x)), math.Exp(float64(x))
		worst = max(worst, math.Abs(got-want)/want)
	}
	if worst > 3e-7 {
		t.Fatalf("relative error %g", worst)
	}
	if exp32(-100) != 0 || !math.IsInf(float64(exp32(100)), 1) || !math.IsNaN(float64(exp32(float32(math.NaN())))) || exp32(0) != 1 {
		t.Fatal("special values")
	}
}

// TestVExp32 checks the vectorized exponential against math.Exp, including
// -Inf and arguments below the underflow threshold, and its sum.
func TestVExp32(t *testing.T) {
	if !hasAVX2FMA {
		t.Skip("no AVX2/FMA (or DFLASH_NOASM set)")
	}
	r := newRand(t)
	for n := 0; n < 70; n++ {
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
		sum := expShift32(x, shift)
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

// TestGemmAcc checks gemmAcc (both layouts, spans, the SIMD and the Go
// paths) against float64 sums.
func TestGemmAcc(t *testing.T) {
	r := newRand(t)
	for _, simd := range simdModes() {
		hasAVX2FMA = simd
		for n := 0; n < 40; n++ {
			m, N, k := 1+r.IntN(11), 1+r.IntN(40), 1+r.IntN(30)
			trans := r.IntN(2) == 0
			lda := k + r.IntN(3)
			rs, ts := lda, 1
			arows := m
			if trans {
				lda = m + r.IntN(3)
				rs, ts, arows = 1, lda, k
			}
			A := to32(randSlice(r, arows*lda))
			ldb, ldc := N+r.IntN(3), N+r.IntN(3)
			B := to32(randSlice(r, k*ldb))
			C := to32(randSlice(r, m*ldc))
			old := append([]float32(nil), C...)
			var inner []span
			if r.IntN(2) == 0 {
				for g := 0; g*rowGroup < m; g++ {
					lo := r.IntN(k + 1)
					inner = append(inner, span{int32(lo), int32(lo + r.IntN(k-lo+1))})
				}
			}
			alpha := float32(r.NormFloat64())
			gemmAcc(C, ldc, A, rs, ts, B, ldb, m, N, k, inner, alpha)
			for i := 0; i < m; i++ {
				t0, t1 := 0, k
				if inner != nil {
					t0, t1 = int(inner[i/rowGroup].lo), int(inner[i/rowGroup].hi)
				}
				for x := 0; x < N; x++ {
					want := 0.0
					for tt := t0; tt < t1; tt++ {
						want += float64(A[i*rs+tt*ts]) * float64(B[tt*ldb+x])
					}
					want = float64(old[i*ldc+x]) + float64(alpha)*want
					if got := float64(C[i*ldc+x]); math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
						t.Fatalf("simd %v trans %v m%d N%d k%d: C[%d,%d] = %v, want %v", simd, trans, m, N, k, i, x, got, want)
					}
				}
			}
		}
	}
}
