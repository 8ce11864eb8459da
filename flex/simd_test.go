package flex

import (
	"math"
	"testing"

	"dflash/dtype"
)

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
			A := dtype.Convert[float32](randSlice(r, arows*lda))
			ldb, ldc := N+r.IntN(3), N+r.IntN(3)
			B := dtype.Convert[float32](randSlice(r, k*ldb))
			C := dtype.Convert[float32](randSlice(r, m*ldc))
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
