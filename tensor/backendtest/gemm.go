package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/dtype"
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
				g := newGemmCase(rng, tr, m, n, k, alpha, beta)
				c := dtype.Convert[float32](g.c0)
				if beta == 0 {
					for i := range c { // beta = 0 must ignore what C held
						c[i] = float32(nanIfZeroBeta())
					}
				}
				cs := b.Upload(c, false)
				stored := make([]float32, len(c)) // C as the backend holds it (rounded to its storage type)
				b.Download(cs, stored)
				b.Gemm(tr[0], tr[1], m, n, k, float32(alpha), b.Upload(dtype.Convert[float32](g.a), false), g.lda, b.Upload(dtype.Convert[float32](g.b), false), g.ldb, float32(beta), cs, g.ldc)
				b.Download(cs, c)
				g.check(t, "Gemm "+b.Name(), c, stored, beta == 0, tol)
			})
		}
	}
}

// runGemmAdd checks GemmAdd, D = alpha·op(A)·op(B) + C, with D apart from C
// (NaN before: its old contents must not matter, and C must stay as it
// was) and with D = C.
func runGemmAdd(t *testing.T, b tensor.Backend[float32], tol Tolerances, rng *rand.Rand) {
	for _, s := range GemmShapes {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, inPlace := range []bool{false, true} {
				m, n, k := s[0], s[1], s[2]
				alpha := rng.NormFloat64()
				t.Run(fmt.Sprintf("m%d_n%d_k%d_tA%v_tB%v_inplace%v", m, n, k, tr[0], tr[1], inPlace), func(t *testing.T) {
					g := newGemmCase(rng, tr, m, n, k, alpha, 1)
					cs := b.Upload(dtype.Convert[float32](g.c0), false)
					stored := make([]float32, len(g.c0))
					b.Download(cs, stored)
					ds := cs
					if !inPlace {
						nan := make([]float32, len(g.c0))
						for i := range nan {
							nan[i] = float32(nanIfZeroBeta())
						}
						ds = b.Upload(nan, false)
					}
					b.GemmAdd(tr[0], tr[1], m, n, k, float32(alpha), b.Upload(dtype.Convert[float32](g.a), false), g.lda, b.Upload(dtype.Convert[float32](g.b), false), g.ldb, cs, ds, g.ldc)
					d := make([]float32, len(g.c0))
					b.Download(ds, d)
					g.check(t, "GemmAdd "+b.Name(), d, stored, !inPlace, tol)
					if !inPlace {
						c := make([]float32, len(g.c0))
						if b.Download(cs, c); !slices.Equal(c, stored) {
							t.Fatal("GemmAdd changed C")
						}
					}
				})
			}
		}
	}
}

// gemmCase is one random product with leading dimensions larger than
// needed (they catch stride bugs) and its float64 reference.
type gemmCase struct {
	m, n, k       int
	lda, ldb, ldc int
	a, b, c0      []float64
	want          []float64 // alpha·op(A)·op(B) + beta·C0
	// scale is the largest |alpha|·Σ|op(A)||op(B)| + |beta·C0| of an
	// element: the rounding of a sum scales with its terms, not its value,
	// which cancellation can make small.
	scale float64
}

func newGemmCase(rng *rand.Rand, tr [2]bool, m, n, k int, alpha, beta float64) *gemmCase {
	ar, ac := m, k
	if tr[0] {
		ar, ac = k, m
	}
	br, bc := k, n
	if tr[1] {
		br, bc = n, k
	}
	g := &gemmCase{m: m, n: n, k: k, lda: ac + 2, ldb: bc + 1, ldc: n + 3}
	g.a, g.b, g.c0 = randVec(rng, ar*g.lda), randVec(rng, br*g.ldb), randVec(rng, m*g.ldc)
	g.want = append([]float64(nil), g.c0...)
	for i := range m {
		for j := range n {
			var s, abs float64
			for p := range k {
				var x, y float64
				if tr[0] {
					x = g.a[p*g.lda+i]
				} else {
					x = g.a[i*g.lda+p]
				}
				if tr[1] {
					y = g.b[j*g.ldb+p]
				} else {
					y = g.b[p*g.ldb+j]
				}
				s += x * y
				abs += math.Abs(x * y)
			}
			g.want[i*g.ldc+j] = alpha*s + beta*g.c0[i*g.ldc+j]
			g.scale = max(g.scale, math.Abs(alpha)*abs+math.Abs(beta*g.c0[i*g.ldc+j]))
		}
	}
	return g
}

// check compares the result c with the reference. Elements between rows
// (j ≥ n) must be stored as they were, or, with free, are not checked (the
// output held NaN before); check may overwrite them in c.
func (g *gemmCase) check(t *testing.T, what string, c, stored []float32, free bool, tol Tolerances) {
	t.Helper()
	want := append([]float64(nil), g.want...)
	for i := range g.m {
		for j := g.n; j < g.ldc && i*g.ldc+j < len(c); j++ {
			if free { // c is the caller's copy: the gap may hold NaN
				want[i*g.ldc+j], c[i*g.ldc+j] = 0, 0
			} else if c[i*g.ldc+j] != stored[i*g.ldc+j] {
				t.Fatalf("%s wrote outside C at row %d col %d", what, i, j)
			}
		}
	}
	// The bound is the larger of (k+1) roundings of max|want| and one of
	// the terms' scale: the second only matters where the sum cancels.
	scale := 1e-3
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	if err := closeErr(c, want, tol.Gemm*float64(g.k+1), math.Max(scale, g.scale/float64(g.k+1))); err != nil {
		t.Errorf("%s: %v", what, err)
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
