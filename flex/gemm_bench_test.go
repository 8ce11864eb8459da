package flex

import (
	"math/rand/v2"
	"testing"
)

// gemmBenchInputs returns the operands of the GEMM benchmarks, m = n = k =
// 128: A (m×k) and B (k×n, or n×k) of uniform random values and a zero C
// (m×n).
func gemmBenchInputs() (m, n, k int, A, B, C []float32) {
	m, n, k = 128, 128, 128
	r := rand.New(rand.NewPCG(1, 2))
	A, B, C = make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	for i := range A {
		A[i] = r.Float32()
	}
	for i := range B {
		B[i] = r.Float32()
	}
	return m, n, k, A, B, C
}

func BenchmarkGemmNT(b *testing.B) {
	m, n, k, A, B, C := gemmBenchInputs()
	b.SetBytes(0)
	for b.Loop() {
		gemmNT(C, n, A, k, B, k, m, n, k, nil, nil, 1, false)
	}
	b.ReportMetric(float64(2*m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func benchGemmAcc(b *testing.B, trans bool) {
	m, n, k, A, B, C := gemmBenchInputs()
	rs, ts := k, 1
	if trans {
		rs, ts = 1, m
	}
	for b.Loop() {
		gemmAcc(C, n, A, rs, ts, B, n, m, n, k, nil, 1)
	}
	b.ReportMetric(float64(2*m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkGemmAccNN(b *testing.B) { benchGemmAcc(b, false) }
func BenchmarkGemmAccTN(b *testing.B) { benchGemmAcc(b, true) }
