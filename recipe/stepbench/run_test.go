package stepbench

import (
	"dflash/internal/jsonkeys"
	"flag"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"dflash/internal/cpufeat"
	"dflash/internal/testseed"
	"dflash/tensor"
)

var update = flag.Bool("update", false, "rewrite testdata/report_keys.golden")

// tinyRun runs tinyOptions once (with a logged seed) for every test that
// reads its report.
var tinyRun = sync.OnceValues(func() (*Report, error) {
	o := tinyOptions()
	o.Seed = seedForRun
	return Run(o)
})

var seedForRun uint64

func runTiny(t *testing.T) *Report {
	t.Helper()
	if seedForRun == 0 {
		seedForRun = testseed.Seed(t)
	}
	rep, err := tinyRun()
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestTinyRunOnCPU runs two timed steps of a tiny target and drafter on the
// CPU and checks the report: the phases add up to the step, the rates and
// MFU follow from the times, the loss of random weights is near ln(vocab).
func TestTinyRunOnCPU(t *testing.T) {
	r := runTiny(t)
	o := tinyOptions()
	p := r.Phases
	for name, ms := range map[string]float64{"input assembly": p.InputAssembly, "target forward": p.TargetForward,
		"drafter forward": p.DrafterForward, "backward": p.Backward, "optimizer": p.Optimizer, "block mask": r.BlockMaskMS} {
		if !(ms > 0) {
			t.Errorf("phase %s: %v ms, want > 0", name, ms)
		}
	}
	if d := math.Abs(p.Sum() - r.StepMS); d > 0.01*r.StepMS {
		t.Errorf("phases add up to %.4f ms, the step took %.4f ms (timed apart)", p.Sum(), r.StepMS)
	}
	if !(r.MinMS <= r.StepMS && r.StepMS <= r.MaxMS) {
		t.Errorf("step mean %.3f ms outside [min %.3f, max %.3f]", r.StepMS, r.MinMS, r.MaxMS)
	}
	near := func(what string, got, want float64) {
		if math.Abs(got-want) > 1e-9*math.Abs(want) {
			t.Errorf("%s = %g, want %g", what, got, want)
		}
	}
	near("tokens/s", r.TokensPerS, float64(o.Batch*o.SeqLen)/(r.StepMS/1e3))
	near("samples/s", r.SamplesPerS, float64(o.Batch)/(r.StepMS/1e3))
	if peak, _ := cpufeat.PeakTFLOPS(runtime.GOMAXPROCS(0)); r.PeakTFLOPS != peak || peak == 0 {
		t.Errorf("peak %v TFLOP/s (%s), this CPU's is %v", r.PeakTFLOPS, r.PeakSource, peak)
	}
	near("step MFU", r.MFU.Step, r.FLOPs.Total()/(r.StepMS/1e3)/(r.PeakTFLOPS*1e12))
	near("target MFU", r.MFU.TargetForward, r.FLOPs.TargetForward/(p.TargetForward/1e3)/(r.PeakTFLOPS*1e12))
	if lnV := math.Log(float64(o.Target.VocabSize)); math.Abs(r.Loss-lnV) > 0.5 {
		t.Errorf("loss %v of random weights, want near ln(vocab) = %v", r.Loss, lnV)
	}
	if r.PeakHeapBytes == 0 || r.PeakLiveBytes == 0 || r.PeakLiveBytes > r.PeakHeapBytes || !(r.FLOPs.Total() > 0) || r.TargetLayers != 4 || !slices.Equal(r.Taps, []int{1, 3}) {
		t.Errorf("report %+v", r)
	}
}

// TestReportJSONSchema compares the report's JSON keys (jsonkeys.Lines)
// with testdata/report_keys.golden; `go test -update` rewrites it after a
// deliberate change of the schema.
func TestReportJSONSchema(t *testing.T) {
	jsonkeys.Golden(t, runTiny(t), filepath.Join("testdata", "report_keys.golden"), *update)
}

// hostClock is a PhaseClock on the host's clock that checks the marks'
// order and counts the device waits between them.
type hostClock struct {
	t      *testing.T
	at     [NumPhases + 1]time.Time
	next   int
	syncs  int // Syncs between a step's first and last mark
	open   bool
	starts int
}

func (c *hostClock) Mark(i int) error {
	if i != c.next {
		c.t.Errorf("mark %d, want %d", i, c.next)
	}
	c.at[i], c.next = time.Now(), (i+1)%(NumPhases+1)
	if i == 0 {
		c.open = true
		c.starts++
	}
	if i == NumPhases {
		c.open = false
	}
	return nil
}

func (c *hostClock) Between(i, j int) (time.Duration, error) { return c.at[j].Sub(c.at[i]), nil }

// TestClockStepHasNoPhaseSyncs: with a PhaseClock the step's phases come from
// its marks, every step marks each boundary in order, and nothing waits for
// the device between a step's first and last mark.
func TestClockStepHasNoPhaseSyncs(t *testing.T) {
	o := tinyOptions()
	o.Seed = testseed.Seed(t)
	clock := &hostClock{t: t}
	dev := CPUEnv(tensor.NewCPU[float32](1))
	dev.Clock = clock
	dev.Sync = func() error {
		if clock.open {
			clock.syncs++
		}
		return nil
	}
	r, err := RunOn(o, dev)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + o.Warmup + o.Steps; clock.starts != want {
		t.Errorf("%d steps marked, want %d", clock.starts, want)
	}
	if clock.syncs != 0 {
		t.Errorf("%d device waits inside steps timed by the clock, want 0", clock.syncs)
	}
	if p := r.Phases; !(p.TargetForward > 0 && p.DrafterForward > 0 && p.Backward > 0) || p.Sum() > r.StepMS*1.01 {
		t.Errorf("phases %+v (sum %.3f ms) for a %.3f ms step: want positive phases within the step", p, p.Sum(), r.StepMS)
	}
}
