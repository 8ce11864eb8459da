package decodebench

import (
	"dflash/internal/jsonkeys"
	"flag"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

var update = flag.Bool("update", false, "rewrite testdata/report_keys.golden")

// tinyOptions is a CPU run of tinyTarget with a peak given, so that the
// report has bounds.
func tinyOptions(t *testing.T) Options {
	return Options{Device: "cpu", TargetName: "tiny", Target: tinyTarget(false), Context: 24, BlockSize: 4, DrafterLayers: 2,
		Reps: 3, Warmup: 1, Seed: testseed.Seed(t), HBMPeak: 1e11}
}

// TestImpliedSpeedup against a simulation: plain decoding of n tokens
// takes n decode steps; speculative decoding takes rounds of a proposal
// and a verification, each yielding tau tokens, until n are out.
func TestImpliedSpeedup(t *testing.T) {
	rng := testseed.New(t)
	for range 20 {
		tau := float64(1 + rng.IntN(8))
		decode, propose, verify := 0.1+rng.Float64(), 0.1+rng.Float64(), 0.1+rng.Float64()
		const n = 840 // a multiple of every tau
		var plain, specTime float64
		for range n {
			plain += decode
		}
		for out := 0.0; out < n; out += tau {
			specTime += propose + verify
		}
		want := plain / specTime
		if got := ImpliedSpeedup(tau, decode, propose, verify); math.Abs(got-want) > 1e-9*want {
			t.Errorf("tau %v, decode %v, propose %v, verify %v: %v, the simulation %v", tau, decode, propose, verify, got, want)
		}
	}
	if got := ImpliedSpeedup(3, 1, 0, 0); got != 0 {
		t.Errorf("a round of no time: %v, want 0", got)
	}
}

// runTiny runs tinyOptions on the CPU.
func runTiny(t *testing.T) (*Report, Options) {
	t.Helper()
	o := tinyOptions(t)
	rep, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	return rep, o
}

// TestTinyRunOnCPU: every pass has positive times, the minimum at most the
// median, the bounds its bytes over the peak, the ratios and speedups
// following from them.
func TestTinyRunOnCPU(t *testing.T) {
	rep, o := runTiny(t)
	if got := []string{rep.Phases[0].Name, rep.Phases[1].Name, rep.Phases[2].Name}; !slices.Equal(got, []string{Decode, Verify, Propose}) || len(rep.Phases) != 3 {
		t.Fatalf("phases %v", got)
	}
	near := func(what string, got, want float64) {
		if math.Abs(got-want) > 1e-9*math.Abs(want) {
			t.Errorf("%s = %g, want %g", what, got, want)
		}
	}
	for _, p := range rep.Phases {
		if !(p.MinMS > 0 && p.MinMS <= p.MedianMS) || p.Bytes <= 0 || p.Launches != 0 {
			t.Errorf("%s: median %v ms, min %v ms, %d bytes, %d launches", p.Name, p.MedianMS, p.MinMS, p.Bytes, p.Launches)
		}
		near(p.Name+" bound", p.BoundMS, float64(p.Bytes)/o.HBMPeak*1e3)
		near(p.Name+" ratio", p.Ratio, p.MedianMS/p.BoundMS)
	}
	d, v, pr := rep.Phase(Decode), rep.Phase(Verify), rep.Phase(Propose)
	if d.Tokens != 1 || v.Tokens != o.BlockSize || pr.Tokens != o.BlockSize || d.Positions != o.Context+1 || v.Positions != o.Context+o.BlockSize {
		t.Errorf("sizes: decode %+v, verify %+v, propose %+v", d, v, pr)
	}
	if len(rep.Speedups) != len(Taus) || rep.SpeedupFormula != SpeedupFormula {
		t.Fatalf("speedups %+v (%q)", rep.Speedups, rep.SpeedupFormula)
	}
	for i, s := range rep.Speedups {
		if s.Tau != Taus[i] {
			t.Errorf("speedup %d at tau %v, want %v", i, s.Tau, Taus[i])
		}
		near("measured speedup", s.Measured, s.Tau*d.MedianMS/(pr.MedianMS+v.MedianMS))
		near("bound speedup", s.Bound, s.Tau*d.BoundMS/(pr.BoundMS+v.BoundMS))
	}
	if rep.WeightDType != "f32" && rep.WeightDType != "float32" || rep.Threads <= 0 || rep.HBMPeakSource != "--hbm-peak" || rep.Timing == "" {
		t.Errorf("report %+v", rep)
	}
}

// TestCountedLaunches: an Env that counts launches gets each pass's count
// of one run after the timed ones (a counter that each op bumps).
func TestCountedLaunches(t *testing.T) {
	o := tinyOptions(t)
	o.Reps, o.Warmup = 1, 0
	b := &countingCPU{Backend: tensor.NewCPU[float32](1)}
	env := CPUEnv(b)
	env.Launches = func() int64 { return b.n }
	rep, err := RunOn(o, env)
	if err != nil {
		t.Fatal(err)
	}
	d, v := rep.Phase(Decode), rep.Phase(Verify)
	// the decode step and the verification run the same layers' ops
	if d.Launches <= 0 || v.Launches != d.Launches || rep.Phase(Propose).Launches <= 0 {
		t.Errorf("launches: decode %d, verify %d, propose %d", d.Launches, v.Launches, rep.Phase(Propose).Launches)
	}
}

// countingCPU is the CPU backend counting its attention calls over a
// cache, one a layer.
type countingCPU struct {
	tensor.Backend[float32]
	n int64
}

func (c *countingCPU) DecodeAttention(q tensor.Storage[float32], heads, n, headDim int, k, v tensor.Storage[float32], kvHeads, maxLen int, at tensor.CacheAt, causal bool, scale float64, out tensor.Storage[float32]) {
	c.n++
	c.Backend.DecodeAttention(q, heads, n, headDim, k, v, kvHeads, maxLen, at, causal, scale, out)
}

// TestDryRun: a dry run has the bytes and bounds and no times; the CPU's
// peak is unknown unless given.
func TestDryRun(t *testing.T) {
	o := tinyOptions(t)
	o.DryRun, o.HBMPeak = true, 0
	rep, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Phases {
		if p.MedianMS != 0 || p.BoundMS != 0 || p.Bytes <= 0 {
			t.Errorf("%s: %+v", p.Name, p)
		}
	}
	if rep.HBMPeak != 0 || !strings.Contains(rep.HBMPeakSource, "--hbm-peak") || !rep.DryRun {
		t.Errorf("peak %v (%s)", rep.HBMPeak, rep.HBMPeakSource)
	}
}

// TestOptionErrors: a bad option is an error naming its flag.
func TestOptionErrors(t *testing.T) {
	for flag, edit := range map[string]func(*Options){
		"--device":         func(o *Options) { o.Device = "tpu" },
		"--context":        func(o *Options) { o.Context = 0 },
		"--block-size":     func(o *Options) { o.BlockSize = 1 },
		"--drafter-layers": func(o *Options) { o.DrafterLayers = 0 },
		"--reps":           func(o *Options) { o.Reps = 0 },
		"--warmup":         func(o *Options) { o.Warmup = -1 },
		"--hbm-peak":       func(o *Options) { o.HBMPeak = -1 },
		"--context ":       func(o *Options) { o.Context = o.Target.MaxPositionEmbeddings },
	} {
		o := tinyOptions(t)
		edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), strings.TrimSpace(flag)) {
			t.Errorf("%s: err %v", flag, err)
		}
	}
	if _, err := Target("qwen9"); err == nil || !strings.Contains(err.Error(), "--target") || !strings.Contains(err.Error(), "qwen3-8b") {
		t.Errorf("unknown target: %v", err)
	}
}

// TestReportJSONSchema compares the report's JSON keys (jsonkeys.Lines)
// with testdata/report_keys.golden; `go test -update` rewrites it after a
// deliberate change of the schema.
func TestReportJSONSchema(t *testing.T) {
	rep, _ := runTiny(t)
	jsonkeys.Golden(t, rep, filepath.Join("testdata", "report_keys.golden"), *update)
}
