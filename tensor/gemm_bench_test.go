package tensor_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"dflash/internal/cputime"
	"dflash/tensor"
)

// gemmBenchShapes are (m, n, k, transA, transB): square, the shapes of a
// linear layer's forward (x·Wᵀ: NT) and backward (dy·W: NN, dyᵀ·x: TN).
var gemmBenchShapes = []struct {
	m, n, k int
	ta, tb  bool
}{
	{512, 512, 512, false, false},
	{2048, 768, 768, false, true},
	{2048, 768, 768, false, false},
	{768, 768, 2048, true, false},
	{4096, 1024, 256, false, true},
	{4096, 256, 1024, false, false},
	{1024, 256, 4096, true, false},
}

// BenchmarkGemm compares the CPU backend's GEMM with gonum's blas32 Sgemm on
// the same shapes (both use GOMAXPROCS goroutines). Run:
//
//	go test -run '^$' -bench Gemm -benchtime 3x ./tensor/
func BenchmarkGemm(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	cpu := tensor.NewCPU[float32](0)
	for _, s := range gemmBenchShapes {
		ar, ac, br, bc := tensor.GemmOperands(s.ta, s.tb, s.m, s.n, s.k)
		a, bb, c := randF32(rng, ar*ac), randF32(rng, br*bc), make(tensor.Host[float32], s.m*s.n)
		name := fmt.Sprintf("%dx%dx%d_%s", s.m, s.n, s.k, transName(s.ta, s.tb))
		flops := 2 * float64(s.m) * float64(s.n) * float64(s.k)
		b.Run("dflash/"+name, func(b *testing.B) {
			for b.Loop() {
				cpu.Gemm(s.ta, s.tb, s.m, s.n, s.k, 1, a, ac, bb, bc, 0, c, s.n)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run("dflash-portable/"+name, func(b *testing.B) {
			p := cpu.WithGemm(tensor.GemmPortable)
			for b.Loop() {
				p.Gemm(s.ta, s.tb, s.m, s.n, s.k, 1, a, ac, bb, bc, 0, c, s.n)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run("gonum/"+name, func(b *testing.B) {
			A := blas32.General{Rows: ar, Cols: ac, Stride: ac, Data: a}
			B := blas32.General{Rows: br, Cols: bc, Stride: bc, Data: bb}
			C := blas32.General{Rows: s.m, Cols: s.n, Stride: s.n, Data: c}
			for b.Loop() {
				blas32.Gemm(tr(s.ta), tr(s.tb), 1, A, B, 0, C)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func tr(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

func transName(ta, tb bool) string {
	s := []byte("NN")
	if ta {
		s[0] = 'T'
	}
	if tb {
		s[1] = 'T'
	}
	return string(s)
}

// randF32 returns n values drawn from the standard normal.
func randF32(rng *rand.Rand, n int) tensor.Host[float32] {
	v := make(tensor.Host[float32], n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// BenchmarkGemmFewRows times x·Wᵀ (a linear layer's forward, NT) for the
// few rows of decoding: one token (m = 1), a speculative block (m = 8) and
// more, on the weight shapes of the demo's target (hidden 128, MLP 384,
// vocab 1024); it reports the process CPU time per product. Run:
// go test -run '^$' -bench GemmFewRows ./tensor/
func BenchmarkGemmFewRows(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	cpu := tensor.NewCPU[float32](0)
	for _, s := range []struct{ n, k int }{{384, 128}, {128, 384}, {1024, 128}} {
		w := randF32(rng, s.n*s.k)
		for _, m := range []int{1, 2, 4, 8, 16} {
			x := randF32(rng, m*s.k)
			c := make(tensor.Host[float32], m*s.n)
			b.Run(fmt.Sprintf("m%d_n%d_k%d", m, s.n, s.k), func(b *testing.B) {
				c0 := cputime.Seconds()
				for b.Loop() {
					cpu.Gemm(false, true, m, s.n, s.k, 1, x, s.k, w, s.k, 0, c, s.n)
				}
				b.ReportMetric((cputime.Seconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
