package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
)

// hostMatrix holds test data as float64 (the reference) and as device bytes.
type hostMatrix struct {
	vals  []float64
	bytes []byte
}

// randomMatrix draws n values on the k/32 grid (|k| < 256), exact in bf16,
// f16 and f32, and encodes them for t.
func randomMatrix(rng *rand.Rand, n int, t dtype.DType) hostMatrix {
	m := hostMatrix{vals: make([]float64, n), bytes: make([]byte, n*t.Size())}
	f := make([]float32, n)
	for i := range m.vals {
		f[i] = float32(rng.IntN(511)-255) / 32
		m.vals[i] = float64(f[i])
	}
	dtype.EncodeFloat32(t, m.bytes, f)
	return m
}

func decode(b []byte, t dtype.DType) []float64 {
	f := make([]float32, len(b)/t.Size())
	dtype.DecodeFloat32(t, f, b)
	return dtype.Convert[float64](f)
}

// TestGemmMatchesFloat64 runs cuBLASLt products on random data and compares
// each element with a float64 CPU product of the same inputs, within the
// rounding of the output type plus fp32 accumulation error.
func TestGemmMatchesFloat64(t *testing.T) {
	w := gputest.Worker0(t)
	rng := testseed.New(t)
	cases := []gpu.GemmSpec{
		{M: 256, N: 192, K: 320, In: dtype.BF16},
		{M: 256, N: 192, K: 320, In: dtype.BF16, TransA: true},
		{M: 256, N: 192, K: 320, In: dtype.BF16, TransB: true},
		{M: 128, N: 96, K: 200, In: dtype.BF16, TransA: true, TransB: true},
		{M: 64, N: 80, K: 96, In: dtype.BF16, Batch: 3},
		{M: 64, N: 80, K: 96, In: dtype.BF16, Batch: 4, TransB: true},
		{M: 256, N: 192, K: 320, In: dtype.BF16, Out: dtype.F32},
		{M: 256, N: 192, K: 320, In: dtype.F16},
		{M: 64, N: 48, K: 72, In: dtype.F16, Batch: 2, TransA: true},
		{M: 200, N: 120, K: 144, In: dtype.F32},
		{M: 200, N: 120, K: 144, In: dtype.F32, TF32: true, TransB: true},
	}
	passed := 0
	for _, spec := range cases {
		name := fmt.Sprintf("%v_M%dN%dK%d_tA%v_tB%v_b%d_out%v_tf32%v", spec.In, spec.M, spec.N, spec.K, spec.TransA, spec.TransB, spec.Batch, spec.Out, spec.TF32)
		t.Run(name, func(t *testing.T) {
			out := spec.Out
			if out == 0 {
				out = spec.In
			}
			batch := max(spec.Batch, 1)
			m, n, k := spec.M, spec.N, spec.K
			a := randomMatrix(rng, batch*m*k, spec.In)
			b := randomMatrix(rng, batch*k*n, spec.In)
			c0 := randomMatrix(rng, batch*m*n, out)
			alpha, beta := float32(0.75), float32(0.5)
			got := make([]byte, len(c0.bytes))
			err := w.Run(func(d *gpu.Device) error {
				bufs := make([]gpu.Buffer, 3)
				for i, src := range [][]byte{a.bytes, b.bytes, c0.bytes} {
					var err error
					if bufs[i], err = d.Alloc(int64(len(src))); err != nil {
						return err
					}
					defer d.Free(bufs[i])
					if err := gpu.Upload(d, bufs[i], src); err != nil {
						return err
					}
				}
				if err := d.Gemm(nil, spec, alpha, bufs[0].Ptr, bufs[1].Ptr, beta, bufs[2].Ptr); err != nil {
					return err
				}
				return gpu.Download(d, got, bufs[2])
			})
			if err != nil {
				t.Fatal(err)
			}
			res := decode(got, out)
			outEps := map[dtype.DType]float64{dtype.BF16: 1.0 / 256, dtype.F16: 1.0 / 2048, dtype.F32: 1.0 / (1 << 23)}[out]
			accEps := 1.0 / (1 << 20)
			if spec.TF32 {
				accEps = 1.0 / (1 << 10) // inputs rounded to a 10-bit mantissa
			}
			bad, worst := 0, 0.0
			for bi := 0; bi < batch; bi++ {
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						ref, mag := 0.0, 0.0
						for p := 0; p < k; p++ {
							ai := bi*m*k + i*k + p
							if spec.TransA {
								ai = bi*m*k + p*m + i
							}
							bj := bi*k*n + p*n + j
							if spec.TransB {
								bj = bi*k*n + j*k + p
							}
							ref += a.vals[ai] * b.vals[bj]
							mag += math.Abs(a.vals[ai] * b.vals[bj])
						}
						ci := bi*m*n + i*n + j
						ref = float64(alpha)*ref + float64(beta)*c0.vals[ci]
						mag = float64(alpha)*mag + math.Abs(float64(beta)*c0.vals[ci])
						diff := math.Abs(res[ci] - ref)
						tol := outEps*math.Abs(ref) + accEps*mag + 1e-30
						worst = math.Max(worst, diff/tol)
						if diff > tol {
							if bad < 3 {
								t.Errorf("C[%d][%d][%d] = %v, want %v (tol %.3g)", bi, i, j, res[ci], ref, tol)
							}
							bad++
						}
					}
				}
			}
			if bad == 0 {
				passed++
			}
			t.Logf("worst error / tolerance = %.3f", worst)
		})
	}
	report(t, "cuBLASLt GEMM vs float64 CPU (bf16/f16/f32, transposes, strided batch)", passed == len(cases),
		fmt.Sprintf("%d of %d cases within tolerance", passed, len(cases)), map[string]float64{"cases": float64(len(cases)), "passed": float64(passed)})
}

// TestGemmThroughput times a bf16 8192x8192x8192 product (set
// DFLASH_GEMM_BENCH=1; scripts/gpu-check.sh does): mean of 50 products after
// 10 warm-ups, timed with events, with the heuristic's first algorithm and
// after TuneGemm.
func TestGemmThroughput(t *testing.T) {
	if os.Getenv("DFLASH_GEMM_BENCH") == "" {
		t.Skip("set DFLASH_GEMM_BENCH=1 to time the 8192^3 bf16 product")
	}
	w := gputest.Worker0(t)
	const n = 8192
	spec := gpu.GemmSpec{M: n, N: n, K: n, In: dtype.BF16}
	rng := testseed.New(t)
	host := make([]uint16, n*n)
	results := map[string]float64{}
	err := w.Run(func(d *gpu.Device) error {
		var bufs [3]gpu.Buffer
		for i := range bufs {
			var err error
			if bufs[i], err = d.Alloc(2 * n * n); err != nil {
				return err
			}
			defer d.Free(bufs[i])
			if i < 2 { // random normal inputs, as torch.randn
				for j := range host {
					host[j] = dtype.Float32ToBF16(float32(rng.NormFloat64()))
				}
				if err := gpu.Upload(d, bufs[i], host); err != nil {
					return err
				}
			}
		}
		timeIt := func(label string) error {
			const iters = 50
			tm, err := d.Time(1, 1, func() error {
				for range iters {
					if err := d.Gemm(nil, spec, 1, bufs[0].Ptr, bufs[1].Ptr, 0, bufs[2].Ptr); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			per := tm.Samples[0].Seconds() / iters
			results[label+"_ms"] = per * 1e3
			results[label+"_tflops"] = 2 * math.Pow(n, 3) / per / 1e12
			return nil
		}
		if err := timeIt("heuristic"); err != nil {
			return err
		}
		t0 := time.Now()
		times, err := d.TuneGemm(spec, bufs[0].Ptr, bufs[1].Ptr, bufs[2].Ptr, 20)
		if err != nil {
			return err
		}
		results["tune_s"] = time.Since(t0).Seconds()
		results["candidates"] = float64(len(times))
		_, inUse, err := d.GemmAlgorithms(spec)
		if err != nil {
			return err
		}
		results["tuned_choice"] = float64(inUse)
		return timeIt("tuned")
	})
	if err != nil {
		t.Fatal(err)
	}
	best := math.Max(results["heuristic_tflops"], results["tuned_tflops"])
	results["best_tflops"] = best
	report(t, "dflash cuBLASLt bf16 8192^3", best > 0,
		fmt.Sprintf("heuristic #0 %.1f TFLOP/s, tuned (candidate %d of %d) %.1f TFLOP/s", results["heuristic_tflops"],
			int(results["tuned_choice"]), int(results["candidates"]), results["tuned_tflops"]), results)
}
