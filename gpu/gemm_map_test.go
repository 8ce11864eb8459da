package gpu

import (
	"fmt"
	"math"
	"testing"

	"dflash/dtype"
	"dflash/internal/testseed"
)

// colMajorGemm evaluates what cuBLASLt computes for cm on flat buffers:
// D = op(A) op(B) in column-major storage, per batch entry.
func colMajorGemm(cm colMajor, batch int, a, b []float64, m, n, k int) []float64 {
	at := func(buf []float64, base int64, rows, cols uint64, ld int64, trans bool, i, j int) float64 {
		// element (i, j) of op(X); X stored column-major rows x cols
		if trans {
			i, j = j, i
		}
		if uint64(i) >= rows || uint64(j) >= cols {
			panic("index outside the stored matrix")
		}
		return buf[base+int64(j)*ld+int64(i)]
	}
	c := make([]float64, int64(batch-1)*cm.strideC+int64(cm.cCols-1)*cm.ldc+int64(cm.cRows))
	for bi := 0; bi < batch; bi++ {
		for i := 0; i < m; i++ { // rows of D (cuBLAS m = our N)
			for j := 0; j < n; j++ { // cols of D (cuBLAS n = our M)
				s := 0.0
				for p := 0; p < k; p++ {
					s += at(a, int64(bi)*cm.strideA, cm.aRows, cm.aCols, cm.lda, cm.transA, i, p) *
						at(b, int64(bi)*cm.strideB, cm.bRows, cm.bCols, cm.ldb, cm.transB, p, j)
				}
				c[int64(bi)*cm.strideC+int64(j)*cm.ldc+int64(i)] = s
			}
		}
	}
	return c
}

// TestGemmRowMajorMapping checks that the column-major problem handed to
// cuBLASLt computes the row-major product the spec describes, on the CPU.
func TestGemmRowMajorMapping(t *testing.T) {
	rng := testseed.New(t)
	for _, tc := range []GemmSpec{
		{M: 5, N: 7, K: 3},
		{M: 5, N: 7, K: 3, TransA: true},
		{M: 5, N: 7, K: 3, TransB: true},
		{M: 4, N: 6, K: 9, TransA: true, TransB: true},
		{M: 3, N: 4, K: 5, Batch: 3},
		{M: 3, N: 4, K: 5, Batch: 2, TransB: true, LDA: 8, LDB: 6, LDC: 7},
		{M: 2, N: 3, K: 4, Batch: 3, TransA: true, StrideA: 100, StrideB: 50, StrideC: 30},
	} {
		t.Run(fmt.Sprintf("%+v", tc), func(t *testing.T) {
			tc.In = dtype.F32
			s := tc.normalized()
			aRows, bRows := s.M, s.K
			if s.TransA {
				aRows = s.K
			}
			if s.TransB {
				bRows = s.N
			}
			a := make([]float64, int64(s.Batch-1)*s.StrideA+int64(aRows*s.LDA))
			b := make([]float64, int64(s.Batch-1)*s.StrideB+int64(bRows*s.LDB))
			for i := range a {
				a[i] = rng.NormFloat64()
			}
			for i := range b {
				b[i] = rng.NormFloat64()
			}
			cm := s.toColMajor()
			got := colMajorGemm(cm, s.Batch, b, a, s.N, s.M, s.K)
			for bi := 0; bi < s.Batch; bi++ {
				for i := 0; i < s.M; i++ {
					for j := 0; j < s.N; j++ {
						want := 0.0
						for p := 0; p < s.K; p++ {
							ai, bj := int64(i*s.LDA+p), int64(p*s.LDB+j)
							if s.TransA {
								ai = int64(p*s.LDA + i)
							}
							if s.TransB {
								bj = int64(j*s.LDB + p)
							}
							av, bv := a[int64(bi)*s.StrideA+ai], b[int64(bi)*s.StrideB+bj]
							want += av * bv
						}
						g := got[int64(bi)*s.StrideC+int64(i*s.LDC+j)]
						if math.Abs(g-want) > 1e-12*(1+math.Abs(want)) {
							t.Fatalf("C[%d][%d][%d] = %v, want %v", bi, i, j, g, want)
						}
					}
				}
			}
		})
	}
}

func TestGemmSpecMisuse(t *testing.T) {
	for name, s := range map[string]GemmSpec{
		"zero M":      {N: 1, K: 1, In: dtype.BF16},
		"no dtype":    {M: 1, N: 1, K: 1},
		"LDA too low": {M: 2, N: 2, K: 4, LDA: 3, In: dtype.BF16},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s accepted", name)
				}
			}()
			s.normalized()
		})
	}
}
