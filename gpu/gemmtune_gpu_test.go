package gpu_test

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
)

// stepGemm is one GEMM of the 8B drafter training step, as the step's
// profile names it (bench/results/step-gpu/2026-12-01-s4-call1-step-prof.txt):
// M×N×K, transposes, output dtype, beta, and add for a GemmAdd (beta 1,
// out beside C).
type stepGemm struct {
	label string
	spec  gpu.GemmSpec
	beta  float32
	add   bool
}

func (g stepGemm) name() string {
	tr := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	op, out := "Gemm", ""
	if g.add {
		op = "GemmAdd"
	}
	if g.spec.Out == dtype.F32 {
		out = "->f32"
	}
	return fmt.Sprintf("%s %s%s bf16%s %dx%dx%d b%g", op, tr(g.spec.TransA), tr(g.spec.TransB), out, g.spec.M, g.spec.N, g.spec.K, g.beta)
}

// stepGemms lists the step's products: the target's forward (12288 rows),
// the drafter's forward and backward (32768 query rows, 12288 context
// rows, 3533- and 2456-row LM-head chunks), weight gradients in fp32 with
// beta 1.
func stepGemms() []stepGemm {
	g := func(label string, m, n, k int, ta, tb bool, out dtype.DType, beta float32, add bool) stepGemm {
		return stepGemm{label, gpu.GemmSpec{M: m, N: n, K: k, TransA: ta, TransB: tb, In: dtype.BF16, Out: out}, beta, add}
	}
	bf, f32 := dtype.BF16, dtype.F32
	return []stepGemm{
		g("target gate-up", 12288, 24576, 4096, false, true, bf, 0, false),
		g("target down+res", 12288, 4096, 12288, false, true, bf, 1, true),
		g("target q", 12288, 4096, 4096, false, true, bf, 0, false),
		g("target o+res", 12288, 4096, 4096, false, true, bf, 1, true),
		g("target k/v", 12288, 1024, 4096, false, true, bf, 0, false),
		g("drafter gate-up", 32768, 24576, 4096, false, true, bf, 0, false),
		g("drafter down+res", 32768, 4096, 12288, false, true, bf, 1, true),
		g("drafter q", 32768, 4096, 4096, false, true, bf, 0, false),
		g("drafter o+res", 32768, 4096, 4096, false, true, bf, 1, true),
		g("drafter k/v", 32768, 1024, 4096, false, true, bf, 0, false),
		g("drafter ctx k/v", 12288, 1024, 4096, false, true, bf, 0, false),
		g("drafter fc", 12288, 4096, 20480, false, true, bf, 0, false),
		g("lm head logits", 3533, 151936, 4096, false, true, bf, 0, false),
		g("lm head dx", 3533, 4096, 151936, false, false, f32, 0, false),
		g("bwd gate-up dx", 32768, 4096, 24576, false, false, bf, 0, false),
		g("bwd gate-up dW", 24576, 4096, 32768, true, false, f32, 1, false),
		g("bwd down dx", 32768, 12288, 4096, false, false, bf, 0, false),
		g("bwd down dW", 4096, 12288, 32768, true, false, f32, 1, false),
		g("bwd q/o dx", 32768, 4096, 4096, false, false, bf, 0, false),
		g("bwd q/o dx acc", 32768, 4096, 4096, false, false, bf, 1, false),
		g("bwd q/o dW", 4096, 4096, 32768, true, false, f32, 1, false),
		g("bwd k/v dx", 32768, 4096, 1024, false, false, bf, 0, false),
		g("bwd k/v dx acc", 32768, 4096, 1024, false, false, bf, 1, false),
		g("bwd k/v dW", 1024, 4096, 32768, true, false, f32, 1, false),
		g("bwd ctx k/v dx", 12288, 4096, 1024, false, false, bf, 0, false),
		g("bwd ctx k/v dx acc", 12288, 4096, 1024, false, false, bf, 1, false),
		g("bwd ctx k/v dW", 1024, 4096, 12288, true, false, f32, 1, false),
		g("bwd fc dW", 4096, 20480, 12288, true, false, f32, 1, false),
	}
}

// TestGemmStepShapes times every cuBLASLt candidate for each GEMM of the
// 8B drafter step (stepGemms) with workspaces of 32, 128 and 256 MiB (set
// DFLASH_GEMM_BENCH=1; scripts/gpu-gemm-tune.sh does): three interleaved
// rounds per shape and workspace, each candidate's best round. It prints a
// table of the heuristic's first against the best (by SetGemmTuning's >2%
// rule) per shape and workspace, in ms per call and TFLOP/s, then every
// candidate's TFLOP/s.
func TestGemmStepShapes(t *testing.T) {
	if os.Getenv("DFLASH_GEMM_BENCH") == "" {
		t.Skip("set DFLASH_GEMM_BENCH=1 to time the step's GEMM shapes")
	}
	w := gputest.Worker0(t)
	rng := testseed.New(t)
	workspaces := []int64{32 << 20, 128 << 20, 256 << 20}
	shapes := stepGemms()
	var maxA, maxB, maxC int64
	for _, g := range shapes {
		s := g.spec
		maxA = max(maxA, 2*int64(s.M)*int64(s.K))
		maxB = max(maxB, 2*int64(s.K)*int64(s.N))
		maxC = max(maxC, int64(s.Out.Size())*int64(s.M)*int64(s.N))
	}
	type result struct {
		times [][]float64 // per workspace, per candidate
	}
	results := make([]result, len(shapes))
	t0 := time.Now()
	err := w.Run(func(d *gpu.Device) error {
		var bufs [4]gpu.Buffer // A, B, C, D
		for i, n := range []int64{maxA, maxB, maxC, maxC} {
			var err error
			if bufs[i], err = d.Alloc(n); err != nil {
				return err
			}
			defer d.Free(bufs[i])
		}
		// A and B: random normal bf16, a 32 MiB chunk tiled over each; C
		// and D: zeros, valid in bf16 and fp32 alike.
		chunk := make([]uint16, 16<<20)
		for i := range chunk {
			chunk[i] = dtype.Float32ToBF16(float32(rng.NormFloat64()))
		}
		for _, b := range bufs[:2] {
			if err := gpu.Upload(d, b, chunk); err != nil {
				return err
			}
			for off := int64(2 * len(chunk)); off < b.Size; off += int64(2 * len(chunk)) {
				n := min(int64(2*len(chunk)), b.Size-off)
				if err := d.CopyAsync(gpu.Buffer{Ptr: b.Ptr + cuda.DevicePtr(off), Size: n}, b, n, nil); err != nil {
					return err
				}
			}
		}
		for _, b := range bufs[2:] {
			if err := d.Memset(b, 0, nil); err != nil {
				return err
			}
		}
		for si, g := range shapes {
			out := bufs[2].Ptr
			if g.add {
				out = bufs[3].Ptr
			}
			flops := 2 * float64(g.spec.M) * float64(g.spec.N) * float64(g.spec.K)
			reps := int(min(50, max(1, math.Ceil(5e-3/(flops/600e12))))) // ~5 ms a sample
			for _, ws := range workspaces {
				times, err := d.TimeGemmCandidates(g.spec, ws, g.beta, bufs[0].Ptr, bufs[1].Ptr, bufs[2].Ptr, out, 3, reps)
				if err != nil {
					return fmt.Errorf("%s, %d MiB workspace: %w", g.name(), ws>>20, err)
				}
				results[si].times = append(results[si].times, times)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tflops := func(g stepGemm, s float64) float64 {
		return 2 * float64(g.spec.M) * float64(g.spec.N) * float64(g.spec.K) / s / 1e12
	}
	var detail strings.Builder
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\tcase\tws MiB\tcands\t#0 ms\t#0 TFLOP/s\tbest\tbest ms\tbest TFLOP/s\tgain vs #0\tgain vs 32 MiB #0\t")
	metrics := map[string]float64{}
	var saved float64 // ms per call summed over shapes, best of all workspaces vs 32 MiB #0
	for si, g := range shapes {
		base := results[si].times[0][0]
		bestAll := base
		for wi, times := range results[si].times {
			best, _ := gpu.PickGemm(times)
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.3f\t%.0f\t#%d\t%.3f\t%.0f\t%+.1f%%\t%+.1f%%\t\n", g.name(), g.label, workspaces[wi]>>20, len(times),
				times[0]*1e3, tflops(g, times[0]), best, times[best]*1e3, tflops(g, times[best]), 100*(times[0]/times[best]-1), 100*(base/times[best]-1))
			fmt.Fprintf(&detail, "%-36s %3d MiB:", g.name(), workspaces[wi]>>20)
			for i, s := range times {
				fmt.Fprintf(&detail, " #%d %.0f", i, tflops(g, s))
			}
			detail.WriteString(" TFLOP/s\n")
			bestAll = math.Min(bestAll, times[best])
		}
		saved += (base - bestAll) * 1e3
		metrics[g.label+"_h32_tflops"] = tflops(g, base)
		metrics[g.label+"_best_tflops"] = tflops(g, bestAll)
	}
	tw.Flush()
	fmt.Printf("\neach candidate, in the heuristic's order (+Inf s = 0 TFLOP/s: could not run):\n%s", detail.String())
	fmt.Printf("\nsum over shapes of ms per call saved by the best (any workspace, >2%% rule) against 32 MiB #0: %.3f ms; %.1f s total\n",
		saved, time.Since(t0).Seconds())
	metrics["saved_ms_per_call_sum"] = saved
	report(t, "cuBLASLt candidates for the 8B step's GEMM shapes", true, fmt.Sprintf("%d shapes x %d workspaces", len(shapes), len(workspaces)), metrics)
}

// refGemm returns alpha·op(A)·op(B) + beta·C in float64 for a packed
// single-batch spec, and per element the sum of the terms' magnitudes.
func refGemm(s gpu.GemmSpec, alpha float64, a, b []float64, beta float64, c []float64) (out, mag []float64) {
	out, mag = make([]float64, s.M*s.N), make([]float64, s.M*s.N)
	for i := range s.M {
		for j := range s.N {
			sum, m := 0.0, 0.0
			for p := range s.K {
				ai, bj := i*s.K+p, p*s.N+j
				if s.TransA {
					ai = p*s.M + i
				}
				if s.TransB {
					bj = j*s.K + p
				}
				sum += a[ai] * b[bj]
				m += math.Abs(a[ai] * b[bj])
			}
			out[i*s.N+j] = alpha*sum + beta*c[i*s.N+j]
			mag[i*s.N+j] = math.Abs(alpha)*m + math.Abs(beta*c[i*s.N+j])
		}
	}
	return out, mag
}

// TestGPUGemmTuning runs two products with SetGemmTuning on a fresh
// directory: a GemmAdd (beta 1, D beside C) and an fp32 accumulation in
// place (beta 1, D = C). Each must equal its float64 reference (the
// caller's C read once: tuning ran on scratch), C of the GemmAdd must be
// unchanged, and both plans must have been timed. Then, as a new process
// (plans forgotten, a new tuner on the same directory), the same products
// must take the saved choices without timing and give the same results.
// Last, the GemmAdd through Device.Replay (eager, captured, launched) on a
// new directory: tuned once, in the eager run, and right every run.
func TestGPUGemmTuning(t *testing.T) {
	w := gputest.Worker0(t)
	rng := testseed.New(t)
	dir := t.TempDir()
	// Sizes over gemmTuneMin (about 4 µs each), so that both are timed.
	add := gpu.GemmSpec{M: 1024, N: 1024, K: 1024, TransB: true, In: dtype.BF16}
	acc := gpu.GemmSpec{M: 1024, N: 768, K: 1280, TransA: true, In: dtype.BF16, Out: dtype.F32}
	const alpha = 0.75
	a1, b1 := randomMatrix(rng, add.M*add.K, dtype.BF16), randomMatrix(rng, add.K*add.N, dtype.BF16)
	c1, d1 := randomMatrix(rng, add.M*add.N, dtype.BF16), randomMatrix(rng, add.M*add.N, dtype.BF16)
	a2, b2 := randomMatrix(rng, acc.M*acc.K, dtype.BF16), randomMatrix(rng, acc.K*acc.N, dtype.BF16)
	c2 := randomMatrix(rng, acc.M*acc.N, dtype.F32)
	want1, mag1 := refGemm(add, alpha, a1.vals, b1.vals, 1, c1.vals)
	want2, mag2 := refGemm(acc, 1, a2.vals, b2.vals, 1, c2.vals)
	check := func(what string, got []float64, out dtype.DType, want, mag []float64) {
		t.Helper()
		eps := map[dtype.DType]float64{dtype.BF16: 1.0 / 256, dtype.F32: 1.0 / (1 << 23)}[out]
		for i := range want {
			if tol := eps*math.Abs(want[i]) + mag[i]/(1<<20) + 1e-30; math.Abs(got[i]-want[i]) > tol {
				t.Errorf("%s: element %d = %v, want %v (tol %.3g)", what, i, got[i], want[i], tol)
				return
			}
		}
	}
	var stats [3]gpu.GemmTuneStats
	var inUse [2][2]int
	var kinds []gpu.ReplayKind
	err := w.Run(func(d *gpu.Device) error {
		defer gpu.ForgetGemmPlans(d) // tuning off again for the other tests
		bufs := make([]gpu.Buffer, 7)
		for i, m := range []hostMatrix{a1, b1, c1, d1, a2, b2, c2} {
			var err error
			if bufs[i], err = d.Alloc(int64(len(m.bytes))); err != nil {
				return err
			}
			defer d.Free(bufs[i])
			if err := gpu.Upload(d, bufs[i], m.bytes); err != nil {
				return err
			}
		}
		gemmAdd := func() error {
			return d.GemmTo(nil, add, alpha, bufs[0].Ptr, bufs[1].Ptr, 1, bufs[2].Ptr, bufs[3].Ptr)
		}
		products := func(run int) error {
			if err := gpu.Upload(d, bufs[6], c2.bytes); err != nil { // C of the accumulation afresh
				return err
			}
			if err := gemmAdd(); err != nil {
				return err
			}
			if err := d.Gemm(nil, acc, 1, bufs[4].Ptr, bufs[5].Ptr, 1, bufs[6].Ptr); err != nil {
				return err
			}
			got1, gotC1, got2 := make([]byte, len(d1.bytes)), make([]byte, len(c1.bytes)), make([]byte, len(c2.bytes))
			for _, dl := range []struct {
				dst []byte
				b   gpu.Buffer
			}{{got1, bufs[3]}, {gotC1, bufs[2]}, {got2, bufs[6]}} {
				if err := gpu.Download(d, dl.dst, dl.b); err != nil {
					return err
				}
			}
			check(fmt.Sprintf("run %d GemmAdd", run), decode(got1, dtype.BF16), dtype.BF16, want1, mag1)
			check(fmt.Sprintf("run %d GemmAdd's C", run), decode(gotC1, dtype.BF16), dtype.BF16, c1.vals, make([]float64, len(c1.vals)))
			check(fmt.Sprintf("run %d accumulation", run), decode(got2, dtype.F32), dtype.F32, want2, mag2)
			for i, s := range []gpu.GemmSpec{add, acc} {
				_, use, err := d.GemmAlgorithms(s)
				if err != nil {
					return err
				}
				inUse[run][i] = use
			}
			stats[run] = d.GemmTuneStats()
			return nil
		}
		for run := range 2 { // the first process, then the second
			if err := gpu.ForgetGemmPlans(d); err != nil {
				return err
			}
			if err := d.SetGemmTuning(dir); err != nil {
				return err
			}
			if err := products(run); err != nil {
				return err
			}
		}
		if err := gpu.ForgetGemmPlans(d); err != nil {
			return err
		}
		if err := d.SetGemmTuning(t.TempDir()); err != nil {
			return err
		}
		for range 3 {
			kind, err := d.Replay("gemm tuning", gemmAdd)
			if err != nil {
				return err
			}
			kinds = append(kinds, kind)
		}
		got := make([]byte, len(d1.bytes))
		if err := gpu.Download(d, got, bufs[3]); err != nil {
			return err
		}
		check("replayed GemmAdd", decode(got, dtype.BF16), dtype.BF16, want1, mag1)
		stats[2] = d.GemmTuneStats()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if stats[0].Timed != 2 || stats[0].Loaded != 0 {
		t.Errorf("first process: %+v, want 2 plans timed", stats[0])
	}
	if stats[1].Timed != 0 || stats[1].Loaded != 2 || inUse[1] != inUse[0] {
		t.Errorf("second process: %+v using candidates %v; want 2 loaded, none timed, candidates %v", stats[1], inUse[1], inUse[0])
	}
	if want := []gpu.ReplayKind{gpu.ReplayEager, gpu.ReplayCaptured, gpu.ReplayLaunched}; fmt.Sprint(kinds) != fmt.Sprint(want) || stats[2].Timed != 1 {
		t.Errorf("replay: %v with %+v; want %v and 1 plan timed", kinds, stats[2], want)
	}
	t.Logf("tuning: first process %+v (candidates in use %v), second %+v, replay %+v", stats[0], inUse[0], stats[1], stats[2])
	report(t, "GEMM tuning: timed on scratch, persisted, taken from disk, replayed", !t.Failed(),
		fmt.Sprintf("timed %d (%.2f s), then loaded %d", stats[0].Timed, stats[0].Seconds, stats[1].Loaded), nil)
}
