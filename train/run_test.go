package train

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"dflash/internal/testlog"
)

func mustRun(t *testing.T, ctx context.Context, cfg Config, h Hooks) *Result {
	t.Helper()
	res, err := run(ctx, cfg, h, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestResumeExact: N steps straight and N/2 + resume + N/2 give bit-identical
// parameters, for several step counts, accumulation settings and stop points.
func TestResumeExact(t *testing.T) {
	cases := []struct {
		name          string
		steps, stopAt int
		accum         int
	}{
		{"even-split", 20, 10, 1},
		{"odd-stop-between-saves", 21, 7, 1},
		{"accumulation", 16, 9, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seed := uint64(c.steps*1000 + c.stopAt)
			t.Logf("seed %d", seed)
			straight := newTask(seed, 16)
			cfg := testConfig(t.TempDir(), c.steps)
			cfg.Seed, cfg.GradAccum = seed, c.accum
			r1 := mustRun(t, context.Background(), cfg, straight.hooks())
			want := snapshot(straight.m.params())

			split := newTask(seed, 16)
			cfg2 := cfg
			cfg2.Out = t.TempDir()
			cfg2.StopAt = c.stopAt
			r2 := mustRun(t, context.Background(), cfg2, split.hooks())
			if r2.Steps != c.stopAt {
				t.Fatalf("first half stopped at %d, want %d", r2.Steps, c.stopAt)
			}
			// A fresh process: new model and data objects, state only from disk.
			resumed := newTask(seed, 16)
			cfg2.StopAt, cfg2.Resume = 0, true
			r3 := mustRun(t, context.Background(), cfg2, resumed.hooks())
			if r3.StartStep != c.stopAt || r3.Steps != c.steps {
				t.Fatalf("resumed from %d to %d, want %d to %d", r3.StartStep, r3.Steps, c.stopAt, c.steps)
			}
			assertSameBits(t, "params", want, snapshot(resumed.m.params()))
			if r3.Tokens != r1.Tokens {
				t.Errorf("tokens %d after resume, %d straight", r3.Tokens, r1.Tokens)
			}
			// The model learned something: the loss fell.
			recs, err := ReadMetrics(filepath.Join(cfg2.Out, MetricsFile))
			if err != nil {
				t.Fatal(err)
			}
			var train []Record
			for _, r := range recs {
				if r.Kind == "train" {
					train = append(train, r)
				}
			}
			if len(train) != c.steps {
				t.Fatalf("%d train records after resume, want %d (one per step)", len(train), c.steps)
			}
			for i, r := range train {
				if r.Step != i+1 {
					t.Fatalf("record %d has step %d", i, r.Step)
				}
			}
		})
	}
}

// TestCancelAndResume cancels the context in the middle of a step: Run checkpoints
// the last finished step, returns the context's error, and a resumed run ends
// bit-identical to an uninterrupted one.
func TestCancelAndResume(t *testing.T) {
	const steps, seed = 18, 7
	straight := newTask(seed, 16)
	cfg := testConfig(t.TempDir(), steps)
	cfg.Seed = seed
	mustRun(t, context.Background(), cfg, straight.hooks())
	want := snapshot(straight.m.params())

	cfg.Out = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	tk := newTask(seed, 16)
	tk.onStep = func(s StepInfo) {
		if s.Step == 6 {
			cancel() // step 6 (0-based) still completes its computation but is dropped
		}
	}
	h := tk.hooks()
	inner := h.Step
	h.Step = func(ctx context.Context, s StepInfo) (float64, map[string]float64, int, error) {
		l, m, n, err := inner(ctx, s)
		if ctx.Err() != nil {
			return 0, nil, 0, ctx.Err()
		}
		return l, m, n, err
	}
	logs := testlog.Capture(t)
	res, err := run(ctx, cfg, h, &bytes.Buffer{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	// The stop is announced during step 7, with the time the step before took.
	if l := logs.String(); !strings.Contains(l, "stop asked for") || !strings.Contains(l, "step=7 ") || !strings.Contains(l, "expected_left_s=") {
		t.Fatalf("log of the stop:\n%s", l)
	}
	if res.Steps != 6 || filepath.Base(res.Checkpoint) != "checkpoint-6" {
		t.Fatalf("stopped at %d with checkpoint %q, want 6", res.Steps, res.Checkpoint)
	}
	resumed := newTask(seed, 16)
	cfg.Resume = true
	mustRun(t, context.Background(), cfg, resumed.hooks())
	assertSameBits(t, "params", want, snapshot(resumed.m.params()))
}

// TestGradAccumMatchesBigBatch: k micro-batches of b examples give the gradient of one
// batch of k*b examples (mean loss), so the first AdamW step moves parameters the same.
func TestGradAccumMatchesBigBatch(t *testing.T) {
	rng := NewRNG(3, 9)
	xs := make([][]float64, 12)
	ys := make([]float64, 12)
	for i := range xs {
		xs[i] = []float64{rng.NormFloat64(), rng.NormFloat64(), rng.NormFloat64()}
		ys[i] = teacher(xs[i])
	}
	big := newMLP(5, 3, 8)
	big.lossGrad(xs, ys)
	acc := newMLP(5, 3, 8)
	for k := range 3 {
		acc.lossGrad(xs[4*k:4*k+4], ys[4*k:4*k+4])
	}
	mustParams(t, acc.arena, testAdamW).ScaleGrad(1.0 / 3)
	for i, p := range big.params() {
		for j, g := range p.Grad() {
			o := acc.params()[i].Grad()[j]
			if math.Abs(float64(g-o)) > 1e-6*(1+math.Abs(float64(g))) {
				t.Fatalf("%s[%d]: big batch %g, accumulated %g", p.Name, j, g, o)
			}
		}
	}
}

// testPeakTFLOPS is the peak FLOP rate TestRunOutputs gives Run.
const testPeakTFLOPS = 1e-6

// TestRunOutputs: the progress lines, metrics.jsonl (every value of a train
// record, the rates against the counts of the task), the plot and the
// checkpoints kept.
func TestRunOutputs(t *testing.T) {
	tk := newTask(11, 16)
	cfg := testConfig(t.TempDir(), 30)
	cfg.Plot, cfg.Progress, cfg.LogEvery = true, "lines", 10
	var stderr bytes.Buffer
	h := tk.hooks()
	gauge := 0.0
	h.PeakTFLOPS, h.Gauges = testPeakTFLOPS, func() map[string]float64 {
		gauge++
		return map[string]float64{"gauge": gauge, "loss": -1} // loss: a clash, dropped
	}
	res, err := run(context.Background(), cfg, h, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stderr:\n%s", stderr.String())
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	var progressLines int
	for _, l := range lines {
		if strings.HasPrefix(l, "step ") {
			progressLines++
			for _, f := range []string{"/30", "loss ", "acc ", "tok/s", "samples/s"} {
				if !strings.Contains(l, f) {
					t.Errorf("progress line %q lacks %q", l, f)
				}
			}
			if strings.Contains(l, "\r") || strings.Contains(l, "\x1b") {
				t.Errorf("terminal control codes in plain lines: %q", l)
			}
		}
	}
	if progressLines != 3 {
		t.Errorf("%d progress lines, want 3 (log_every 10 of 30 steps)", progressLines)
	}
	if !strings.Contains(stderr.String(), "eval @ 30:") {
		t.Error("no eval note on stderr")
	}
	recs, err := ReadMetrics(filepath.Join(cfg.Out, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var nTrain, nEval int
	var first, last float64
	for _, r := range recs {
		switch r.Kind {
		case "train":
			nTrain++
			for _, k := range []string{"loss", "lr", "grad_norm", "tokens", "tokens_per_s", "acc", "samples_per_s", "tflops", "mfu", "gauge"} {
				if _, ok := r.Values[k]; !ok {
					t.Fatalf("train record %+v lacks %s", r, k)
				}
			}
			// The task counts batch samples of in tokens and mlpFLOPs each.
			v := r.Values
			if d := v["samples_per_s"]*float64(tk.m.in)/v["tokens_per_s"] - 1; math.Abs(d) > 1e-12 {
				t.Errorf("step %d: samples/s %g, tokens/s %g with %d tokens a sample", r.Step, v["samples_per_s"], v["tokens_per_s"], tk.m.in)
			}
			if d := v["tflops"]*1e12/(v["samples_per_s"]*tk.m.flops()) - 1; math.Abs(d) > 1e-12 || math.Abs(v["mfu"]*testPeakTFLOPS/v["tflops"]-1) > 1e-12 {
				t.Errorf("step %d: tflops %g, mfu %g at %g samples/s", r.Step, v["tflops"], v["mfu"], v["samples_per_s"])
			}
			if v["gauge"] != float64(r.Step) {
				t.Errorf("step %d: gauge %g, want the step", r.Step, v["gauge"])
			}
		case "eval":
			if nEval == 0 {
				first = r.Values["loss"]
			}
			last = r.Values["loss"]
			nEval++
		}
	}
	if nTrain != 30 || nEval != 6 {
		t.Errorf("%d train and %d eval records, want 30 and 6", nTrain, nEval)
	}
	if !(last < first) {
		t.Errorf("eval loss did not fall: %g -> %g", first, last)
	}
	if res.Best["loss"] > last || res.Best["acc"] < 0 {
		t.Errorf("best %v", res.Best)
	}
	st, err := os.Stat(filepath.Join(cfg.Out, PlotFile))
	if err != nil || st.Size() < 1000 {
		t.Fatalf("plot: %v", err)
	}
	png, _ := os.ReadFile(filepath.Join(cfg.Out, PlotFile))
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Error("plot.png is not a PNG")
	}
	// keep_checkpoints = 2: only the two newest remain, and latest names the newest.
	steps, _ := listCheckpoints(cfg.Out)
	if len(steps) != 2 || steps[0] != 30 || steps[1] != 28 {
		t.Errorf("checkpoints %v, want [30 28]", steps)
	}
	latest, _ := os.ReadFile(filepath.Join(cfg.Out, LatestFile))
	if strings.TrimSpace(string(latest)) != "checkpoint-30" {
		t.Errorf("latest = %q", latest)
	}
	// Without resume, an output directory with checkpoints is refused.
	if _, err := run(context.Background(), cfg, newTask(11, 16).hooks(), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "already holds checkpoints") {
		t.Errorf("rerun without resume: %v", err)
	}
}

func TestProgressBar(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, "bar", 0, 0, 4)
	p.interval = 0
	t0 := time.Now()
	p.begin(t0)
	for s := 1; s <= 4; s++ {
		p.update(s, t0.Add(time.Duration(s)*time.Second), stepLine{loss: 1.5, acc: 0.25, hasAcc: true, tokens: 100, samples: 4})
	}
	out := b.String()
	if !strings.Contains(out, "\r") || !strings.Contains(out, "[########################]") || !strings.Contains(out, "step 4/4") {
		t.Errorf("bar output %q", out)
	}
	if !strings.Contains(out, "ETA") || !strings.Contains(out, "loss 1.5000") || !strings.Contains(out, "acc 0.250") || !strings.Contains(out, " samples/s") {
		t.Errorf("bar lacks fields: %q", out)
	}
}

// setCheckpointHook sets checkpointHook until the test ends.
func setCheckpointHook(t *testing.T, f func(stage string) error) {
	checkpointHook = f
	t.Cleanup(func() { checkpointHook = nil })
}

// TestCheckpointSnapshotIsACopy holds the background write of checkpoint 4
// until training has taken two more steps: the checkpoint must still hold
// the parameters and step count of step 4 (those of an uninterrupted run,
// bit for bit, and not those of step 6), and a run resumed from it ends
// bit-identical to the uninterrupted one.
func TestCheckpointSnapshotIsACopy(t *testing.T) {
	const seed, steps = 21, 12
	cfg := testConfig(t.TempDir(), steps)
	cfg.Seed, cfg.SaveEvery, cfg.KeepCheckpoints = seed, 4, 0
	ref := stepReference(t, newTask(seed, 16), cfg)

	cfg.Out = t.TempDir()
	tk := newTask(seed, 16)
	moved := make(chan struct{})
	tk.onStep = func(s StepInfo) {
		if s.Step == 6 && s.Micro == 0 {
			close(moved)
		}
	}
	var held atomic.Bool
	setCheckpointHook(t, func(stage string) error {
		if stage != "config" || held.Swap(true) {
			return nil
		}
		select {
		case <-moved:
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("training did not go on beside the write")
		}
	})
	mustRun(t, context.Background(), cfg, tk.hooks())

	dir := filepath.Join(cfg.Out, CheckpointName(4))
	m := newMLP(0, 4, 16)
	p := mustParams(t, m.arena, cfg.AdamW())
	if err := p.Load(dir); err != nil {
		t.Fatal(err)
	}
	assertSameBits(t, "checkpoint-4 against step 4", ref[4], snapshot(m.params()))
	if sameBits(ref[6], snapshot(m.params())) {
		t.Fatal("steps 5 and 6 changed nothing: the test cannot tell a copy from a view")
	}
	if p.Steps() != 4 {
		t.Fatalf("checkpoint-4 records %d optimizer steps", p.Steps())
	}
	for _, s := range []int{8, 12} {
		if err := os.RemoveAll(filepath.Join(cfg.Out, CheckpointName(s))); err != nil {
			t.Fatal(err)
		}
	}
	checkpointHook = nil
	cfg.Resume = true
	resumed := newTask(seed, 16)
	if res := mustRun(t, context.Background(), cfg, resumed.hooks()); res.StartStep != 4 {
		t.Fatalf("resumed from step %d, want 4", res.StartStep)
	}
	assertSameBits(t, "resumed from checkpoint-4", ref[steps], snapshot(resumed.m.params()))
}

// sameBits reports whether a and b are bit-identical.
func sameBits(a, b [][]float32) bool {
	for i := range a {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

// TestCheckpointWriteFailure: a background write that fails (here at its
// model stage) is logged right after the next step's progress line, training
// goes on with the later checkpoints, and the run returns an error naming
// the checkpoint and the cause.
func TestCheckpointWriteFailure(t *testing.T) {
	const steps = 12
	cfg := testConfig(t.TempDir(), steps)
	cfg.SaveEvery, cfg.KeepCheckpoints, cfg.Progress, cfg.LogEvery = 4, 0, "lines", 1
	failed := make(chan struct{})
	var writes atomic.Int32
	setCheckpointHook(t, func(stage string) error {
		if stage == "model" && writes.Add(1) == 1 {
			close(failed)
			return errors.New("disk on fire")
		}
		return nil
	})
	tk := newTask(3, 8)
	tk.onStep = func(s StepInfo) {
		if s.Step == 4 { // the step after checkpoint 4's snapshot ends after its write failed
			select {
			case <-failed:
			case <-time.After(30 * time.Second):
				t.Error("checkpoint 4's write did not fail")
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	log := testlog.Capture(t)
	res, err := run(context.Background(), cfg, tk.hooks(), log)
	t.Logf("log:\n%s", log.String())
	if err == nil || !strings.Contains(err.Error(), "checkpoint at step 4") || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("run returned %v, want the failed write of checkpoint 4", err)
	}
	if res == nil || res.Steps != steps || filepath.Base(res.Checkpoint) != CheckpointName(steps) {
		t.Fatalf("result %+v: training should have gone on to the end and its checkpoint", res)
	}
	lines := strings.Split(log.String(), "\n")
	errLine := -1
	for i, l := range lines {
		if strings.Contains(l, "checkpoint write failed") {
			errLine = i
			break
		}
	}
	if errLine < 0 || !strings.Contains(lines[errLine], "step=4") || !strings.Contains(lines[errLine], "disk on fire") {
		t.Fatalf("no error line naming checkpoint 4 and the cause")
	}
	prev := ""
	for _, l := range lines[:errLine] {
		if strings.HasPrefix(l, "step ") {
			prev = l
		}
	}
	if !strings.HasPrefix(prev, "step  5/12") {
		t.Fatalf("the error line follows progress line %q, want the next step's (5)", prev)
	}
	got, err := listCheckpoints(cfg.Out)
	if err != nil || len(got) != 2 || got[0] != 12 || got[1] != 8 {
		t.Fatalf("checkpoints %v (%v), want [12 8]", got, err)
	}
	ents, _ := os.ReadDir(cfg.Out)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			t.Errorf("the failed write left %s", e.Name())
		}
	}
}
