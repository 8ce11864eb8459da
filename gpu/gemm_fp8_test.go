package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
	"dflash/tensor/quant"
)

// fp8Rows returns a rows x cols matrix of normal values, each row's
// magnitude drawn over four decades (so per-row scales matter), quantized
// with per-row scales, or one scale for all when perTensor.
func fp8Rows(rng *rand.Rand, rows, cols int, perTensor bool) (codes []uint8, scales []float32) {
	x := make([]float32, rows*cols)
	for i := range rows {
		mag := math.Pow(10, rng.Float64()*4-2)
		for j := range cols {
			x[i*cols+j] = float32(rng.NormFloat64() * mag)
		}
	}
	scales = quant.RowScales(x, rows, cols)
	if perTensor {
		s := quant.TensorScale(x)
		for i := range scales {
			scales[i] = s
		}
	}
	codes = make([]uint8, len(x))
	quant.QuantizeRows(codes, x, rows, cols, scales)
	return codes, scales
}

// absCodes returns the codes of the magnitudes (sign bit cleared).
func absCodes(q []uint8) []uint8 {
	a := make([]uint8, len(q))
	for i, c := range q {
		a[i] = c & 0x7f
	}
	return a
}

// TestGemmFP8MatchesReference runs cuBLASLt's E4M3 GEMM, C = X·Wᵀ with
// per-token and per-channel scales (ScaleRowsCols) and with per-tensor
// scales, at the target's shapes, and compares it with quant.GemmRef, the
// float64 product of the same codes and scales: the GPU may differ only by
// its fp32 accumulation (a 2^-12 share of Σ|x·w|, allowing for the
// tensor cores' narrower FP8 partial sums) and the rounding of the output
// (2^-8 relative for bf16). Alpha is 0.75; beta 0.5 on a random C checks
// the epilogue too, beta 0 the product alone. The 4096-row case compares every 16th row.
func TestGemmFP8MatchesReference(t *testing.T) {
	w := gputest.Worker0(t)
	rng := testseed.New(t)
	type fp8Case struct {
		m, n, k int
		scale   gpu.GemmScale
		out     dtype.DType
		beta    float32
	}
	var cases []fp8Case
	for _, mnk := range [][3]int{{128, 4096, 4096}, {16, 4096, 12288}, {4096, 4096, 4096}} {
		cases = append(cases,
			fp8Case{mnk[0], mnk[1], mnk[2], gpu.ScaleRowsCols, dtype.BF16, 0.5},
			fp8Case{mnk[0], mnk[1], mnk[2], gpu.ScaleRowsCols, dtype.F32, 0},
			fp8Case{mnk[0], mnk[1], mnk[2], gpu.ScaleTensor, dtype.BF16, 0.5})
	}
	passed := 0
	for _, c := range cases {
		name := fmt.Sprintf("M%dN%dK%d_%v_%v_beta%g", c.m, c.n, c.k, c.scale, c.out, c.beta)
		t.Run(name, func(t *testing.T) {
			spec := gpu.GemmSpec{M: c.m, N: c.n, K: c.k, TransB: true, In: dtype.F8E4M3, Out: c.out, Scale: c.scale}
			perTensor := c.scale == gpu.ScaleTensor
			qx, sx := fp8Rows(rng, c.m, c.k, perTensor)
			qw, sw := fp8Rows(rng, c.n, c.k, perTensor)
			if perTensor {
				sx, sw = sx[:1], sw[:1]
			}
			c0 := randomMatrix(rng, c.m*c.n, c.out)
			alpha, beta := float32(0.75), c.beta
			got := make([]byte, len(c0.bytes))
			f32Bytes := func(v []float32) []byte {
				b := make([]byte, 4*len(v))
				dtype.EncodeFloat32(dtype.F32, b, v)
				return b
			}
			err := w.Run(func(d *gpu.Device) error {
				bufs := make([]gpu.Buffer, 5) // X codes, X scales, W codes, W scales, C
				for i, src := range [][]byte{qx, f32Bytes(sx), qw, f32Bytes(sw), c0.bytes} {
					var err error
					if bufs[i], err = d.Alloc(int64(len(src))); err != nil {
						return err
					}
					defer d.Free(bufs[i])
					if err := gpu.Upload(d, bufs[i], src); err != nil {
						return err
					}
				}
				if err := d.GemmFP8(nil, spec, alpha, bufs[0].Ptr, bufs[1].Ptr, bufs[2].Ptr, bufs[3].Ptr, beta, bufs[4].Ptr, bufs[4].Ptr); err != nil {
					return err
				}
				return gpu.Download(d, got, bufs[4])
			})
			if err != nil {
				t.Fatal(err)
			}
			res := decode(got, c.out)
			// the rows compared, their codes and scales
			step := max(1, c.m/256)
			var rows []int
			for i := 0; i < c.m; i += step {
				rows = append(rows, i)
			}
			rqx := make([]uint8, 0, len(rows)*c.k)
			rsx := make([]float32, len(rows))
			fullSw := sw
			if perTensor {
				fullSw = make([]float32, c.n)
				for j := range fullSw {
					fullSw[j] = sw[0]
				}
			}
			for r, i := range rows {
				rqx = append(rqx, qx[i*c.k:(i+1)*c.k]...)
				rsx[r] = sx[0]
				if !perTensor {
					rsx[r] = sx[i]
				}
			}
			ref := quant.GemmRef(rqx, rsx, qw, fullSw, len(rows), c.n, c.k)
			mag := quant.GemmRef(absCodes(rqx), rsx, absCodes(qw), fullSw, len(rows), c.n, c.k)
			outEps := map[dtype.DType]float64{dtype.BF16: 1.0 / 256, dtype.F32: 1.0 / (1 << 23)}[c.out]
			const accEps = 1.0 / (1 << 12)
			bad, worst := 0, 0.0
			for r, i := range rows {
				for j := range c.n {
					ci := i*c.n + j
					want := float64(alpha)*ref[r*c.n+j] + float64(beta)*c0.vals[ci]
					m := float64(alpha)*mag[r*c.n+j] + math.Abs(float64(beta)*c0.vals[ci])
					diff := math.Abs(res[ci] - want)
					tol := outEps*math.Abs(want) + accEps*m + 1e-30
					worst = math.Max(worst, diff/tol)
					if diff > tol {
						if bad < 3 {
							t.Errorf("C[%d][%d] = %v, want %v (tol %.3g)", i, j, res[ci], want, tol)
						}
						bad++
					}
				}
			}
			t.Logf("%d rows compared, worst error / tolerance = %.4f", len(rows), worst)
			if bad == 0 {
				passed++
			}
		})
	}
	report(t, "cuBLASLt FP8 E4M3 GEMM vs float64 reference (per-token/channel and per-tensor scales)", passed == len(cases),
		fmt.Sprintf("%d of %d cases within tolerance", passed, len(cases)), map[string]float64{"cases": float64(len(cases)), "passed": float64(passed)})
}

// TestGemmFP8Throughput times, at the Qwen3-8B target's projections over
// 12288 tokens (batch 4 × 3072: q/k/v, o, gate+up, down), the bf16 product
// against the FP8 one with per-token/per-channel and with per-tensor scales
// (set DFLASH_GEMM_BENCH=1): mean of 20 products after 3 warm-ups, with the
// heuristic's first algorithm. The FP8 products read the bf16 inputs' bytes
// as codes (NaN codes among them do not change the time); scales are 1.
func TestGemmFP8Throughput(t *testing.T) {
	if os.Getenv("DFLASH_GEMM_BENCH") == "" {
		t.Skip("set DFLASH_GEMM_BENCH=1 to time the FP8 products")
	}
	w := gputest.Worker0(t)
	rng := testseed.New(t)
	const tokens = 12288
	shapes := []struct {
		name string
		n, k int
	}{{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 24576, 4096}, {"down", 4096, 12288}}
	results := map[string]float64{}
	var detail []string
	err := w.Run(func(d *gpu.Device) error {
		for _, sh := range shapes {
			m, n, k := tokens, sh.n, sh.k
			bufs := make([]gpu.Buffer, 5) // A, B (2 bytes each, FP8 uses half), C (f32-sized), scales A, B
			for i, size := range []int{2 * m * k, 2 * n * k, 4 * m * n, 4 * m, 4 * n} {
				var err error
				if bufs[i], err = d.Alloc(int64(size)); err != nil {
					return err
				}
				defer d.Free(bufs[i])
			}
			for i := range 2 {
				host := make([]uint16, bufs[i].Size/2)
				for j := range host {
					host[j] = dtype.Float32ToBF16(float32(rng.NormFloat64()))
				}
				if err := gpu.Upload(d, bufs[i], host); err != nil {
					return err
				}
			}
			for i := 3; i < 5; i++ {
				ones := make([]float32, bufs[i].Size/4)
				for j := range ones {
					ones[j] = 1
				}
				if err := gpu.Upload(d, bufs[i], ones); err != nil {
					return err
				}
			}
			for _, v := range []struct {
				label string
				spec  gpu.GemmSpec
			}{
				{"bf16", gpu.GemmSpec{M: m, N: n, K: k, TransB: true, In: dtype.BF16}},
				{"fp8_rows_cols", gpu.GemmSpec{M: m, N: n, K: k, TransB: true, In: dtype.F8E4M3, Scale: gpu.ScaleRowsCols}},
				{"fp8_tensor", gpu.GemmSpec{M: m, N: n, K: k, TransB: true, In: dtype.F8E4M3, Scale: gpu.ScaleTensor}},
			} {
				const iters = 20
				run := func() error {
					if v.spec.In == dtype.BF16 {
						return d.Gemm(nil, v.spec, 1, bufs[0].Ptr, bufs[1].Ptr, 0, bufs[2].Ptr)
					}
					return d.GemmFP8(nil, v.spec, 1, bufs[0].Ptr, bufs[3].Ptr, bufs[1].Ptr, bufs[4].Ptr, 0, bufs[2].Ptr, bufs[2].Ptr)
				}
				for range 3 {
					if err := run(); err != nil {
						return fmt.Errorf("%s %s: %w", sh.name, v.label, err)
					}
				}
				tm, err := d.Time(0, 1, func() error {
					for range iters {
						if err := run(); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
				per := tm.Samples[0].Seconds() / iters
				key := sh.name + "_" + v.label
				results[key+"_ms"] = per * 1e3
				results[key+"_tflops"] = 2 * float64(m) * float64(n) * float64(k) / per / 1e12
				detail = append(detail, fmt.Sprintf("%s %s %.3f ms %.0f TFLOP/s", sh.name, v.label, per*1e3, results[key+"_tflops"]))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range detail {
		t.Log(l)
	}
	report(t, "cuBLASLt FP8 vs bf16 at the target's projections (12288 tokens)", len(results) == 2*3*len(shapes),
		fmt.Sprint(detail), results)
}
