package backendtest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"dflash/tensor"
)

// GemmShapes are the (m, n, k) the Gemm case checks: odd sizes that exercise
// every edge of the blocking, sizes past one block in each dimension, and
// products of at most 4 rows, and of at most 16 with op(B) = Bᵀ (which the
// CPU backend computes without packing, four dot products at a time; depths
// that are and are not multiples of its 8- and 16-wide steps; more columns
// than one of its blocks of B).
var GemmShapes = [][3]int{{1, 1, 1}, {3, 4, 5}, {7, 13, 2}, {17, 5, 33}, {100, 37, 300}, {5, 300, 70}, {130, 70, 260},
	{1, 300, 70}, {2, 37, 300}, {4, 130, 2}, {1, 9, 1000}, {1, 11, 24}, {8, 37, 64}, {16, 21, 129}, {13, 70, 40},
	{5, 1101, 64}}

func runGemm(t *testing.T, b tensor.Backend[float32], tol Tolerances, rng *rand.Rand) {
	for _, s := range GemmShapes {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			m, n, k := s[0], s[1], s[2]
			alpha, beta := rng.NormFloat64(), []float64{0, 1, rng.NormFloat64()}[rng.IntN(3)]
			name := fmt.Sprintf("m%d_n%d_k%d_tA%v_tB%v", m, n, k, tr[0], tr[1])
			t.Run(name, func(t *testing.T) {
				// Leading dimensions larger than needed catch stride bugs.
				ar, ac := m, k
				if tr[0] {
					ar, ac = k, m
				}
				br, bc := k, n
				if tr[1] {
					br, bc = n, k
				}
				lda, ldb, ldc := ac+2, bc+1, n+3
				a, b64 := randVec(rng, ar*lda), randVec(rng, br*ldb)
				c0 := randVec(rng, m*ldc)
				want := append([]float64(nil), c0...)
				for i := range m {
					for j := range n {
						var s float64
						for p := range k {
							var x, y float64
							if tr[0] {
								x = a[p*lda+i]
							} else {
								x = a[i*lda+p]
							}
							if tr[1] {
								y = b64[j*ldb+p]
							} else {
								y = b64[p*ldb+j]
							}
							s += x * y
						}
						want[i*ldc+j] = alpha*s + beta*c0[i*ldc+j]
					}
				}
				c := to32(c0)
				if beta == 0 {
					for i := range c { // beta = 0 must ignore what C held
						c[i] = float32(nanIfZeroBeta())
					}
				}
				cs := b.Upload(c, false)
				stored := make([]float32, len(c)) // C as the backend holds it (rounded to its storage type)
				b.Download(cs, stored)
				b.Gemm(tr[0], tr[1], m, n, k, float32(alpha), b.Upload(to32(a), false), lda, b.Upload(to32(b64), false), ldb, float32(beta), cs, ldc)
				b.Download(cs, c)
				// Elements between rows (j ≥ n) must be untouched.
				for i := range m {
					for j := n; j < ldc && i*ldc+j < len(c); j++ {
						if beta == 0 {
							want[i*ldc+j] = float64(c[i*ldc+j])
						} else if c[i*ldc+j] != stored[i*ldc+j] {
							t.Fatalf("Gemm wrote outside C at row %d col %d", i, j)
						}
					}
				}
				Close(t, "Gemm "+b.Name(), c, want, tol.Gemm*float64(k+1))
			})
		}
	}
}

func nanIfZeroBeta() float64 { var z float64; return z / z }

func randVec(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	return v
}

func to32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}
