package train

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"dflash/internal/testlog"
)

// TestTimeSplit runs with slow steps, evaluations and checkpoint writes:
// the parts of Result.Time are non-negative, hold at least the sleeps put
// into them and add up to the wall time measured around Run; every
// metrics record's time_steps_s, time_eval_s and time_ckpt_s never
// decrease and add up to its time_wall_s; the evaluations' lines give their
// seconds; and the run ends with one line of the split.
func TestTimeSplit(t *testing.T) {
	const steps, stepSleep, evalSleep, writeSleep = 20, 3 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond
	cfg := testConfig(t.TempDir(), steps)
	cfg.SaveEvery, cfg.EvalEvery, cfg.Progress, cfg.LogEvery = 5, 10, "lines", 5
	tk := newTask(9, 8)
	tk.stepDelay = stepSleep
	h := tk.hooks()
	eval := h.Eval
	h.Eval = func(ctx context.Context, e EvalInfo) (map[string]float64, error) {
		time.Sleep(evalSleep)
		return eval(ctx, e)
	}
	setCheckpointHook(t, func(stage string) error {
		if stage == "model" {
			time.Sleep(writeSleep)
		}
		return nil
	})
	log := testlog.Capture(t)
	t0 := time.Now()
	res, err := run(context.Background(), cfg, h, log)
	wall := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	tm := res.Time
	t.Logf("measured %v, split %+v", wall, tm)
	parts := []struct {
		name string
		d    time.Duration
		min  time.Duration
	}{{"start", tm.Start, 0}, {"steps", tm.Steps, steps * stepSleep}, {"eval", tm.Eval, 2 * evalSleep},
		{"checkpoint", tm.Checkpoint, 0}, {"final", tm.Final, writeSleep / 2}}
	var sum time.Duration
	for _, p := range parts {
		if p.d < p.min {
			t.Errorf("%s took %v, less than the %v slept in it", p.name, p.d, p.min)
		}
		sum += p.d
	}
	if d := wall - sum; d < 0 || d > wall/20+20*time.Millisecond {
		t.Errorf("the parts add up to %v, the measured wall time is %v", sum, wall)
	}
	if tm.Wall > wall || tm.Wall < sum {
		t.Errorf("Result.Time.Wall %v: want between the parts' sum %v and the measured %v", tm.Wall, sum, wall)
	}
	if tm.Writing < 4*writeSleep || tm.WrittenBytes <= 0 || tm.Snapshot <= 0 || tm.Snapshot > tm.Checkpoint || tm.SnapshotBytes <= 0 {
		t.Errorf("writes %v of %d bytes, snapshots %v of %d bytes (stalls %v)", tm.Writing, tm.WrittenBytes, tm.Snapshot, tm.SnapshotBytes, tm.Checkpoint)
	}
	if want := float64(steps * tk.batch); tm.Samples != want {
		t.Errorf("%g samples, want %g", tm.Samples, want)
	}

	recs, err := ReadMetrics(filepath.Join(cfg.Out, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"time_steps_s", "time_eval_s", "time_ckpt_s", "time_wall_s"}
	last := map[string]float64{}
	for _, r := range recs {
		for _, k := range keys {
			v, ok := r.Values[k]
			if !ok || v < last[k] {
				t.Fatalf("%s record of step %d: %s %v (present %v), the record before %v", r.Kind, r.Step, k, v, ok, last[k])
			}
			last[k] = v
		}
		v := r.Values
		if d := v["time_wall_s"] - (v["time_steps_s"] + v["time_eval_s"] + v["time_ckpt_s"]); math.Abs(d) > 0.005+0.02*v["time_wall_s"] {
			t.Errorf("%s record of step %d: wall %v s, steps+eval+ckpt %v s", r.Kind, r.Step, v["time_wall_s"], v["time_wall_s"]-d)
		}
	}
	if last["time_eval_s"] < 2*evalSleep.Seconds() {
		t.Errorf("the records count %v s of evaluation, less than slept", last["time_eval_s"])
	}
	out := log.String()
	if n := len(regexp.MustCompile(`eval @ \d+: .* \(\d+\.\d s\)`).FindAllString(out, -1)); n != 2 {
		t.Errorf("%d evaluation lines with their seconds, want 2:\n%s", n, out)
	}
	split := regexp.MustCompile(`msg="run time" .*`).FindString(out)
	for _, k := range []string{"wall_s=", "start_s=", "steps_s=", "eval_s=", "ckpt_stall_s=", "final_s=", "samples_per_s_wall=", "samples_per_s_steps="} {
		if !strings.Contains(split, k) {
			t.Errorf("split line %q lacks %s", split, k)
		}
	}
}

// rateRE reads the current and average sample rates of a progress line.
var rateRE = regexp.MustCompile(`([0-9.]+) samples/s \(avg ([0-9.]+)\)`)

func rates(t *testing.T, line string) (cur, avg float64) {
	t.Helper()
	m := rateRE.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no rates in %q", line)
	}
	cur, _ = strconv.ParseFloat(m[1], 64)
	avg, _ = strconv.ParseFloat(m[2], 64)
	return cur, avg
}

// TestProgressRate feeds the progress line steps of 0.1 s, then 1 s, then
// 5 s (8 samples each): the current rate is that of the last 20 steps, or of
// the last 30 s when those are fewer, and the average counts from the first
// step's start.
func TestProgressRate(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, "lines", 1, 0, 100)
	t0 := time.Unix(1000, 0)
	p.begin(t0)
	end := t0
	for k := 1; k <= 80; k++ {
		d := 100 * time.Millisecond
		switch {
		case k > 70:
			d = 5 * time.Second
		case k > 40:
			d = time.Second
		}
		end = end.Add(d)
		p.update(k, end, stepLine{loss: 1, tokens: 32, samples: 8})
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	for _, c := range []struct {
		step     int
		cur, avg float64
	}{
		{40, 80, 80},                  // 20 steps of 0.1 s; 320 samples in 4 s
		{70, 8, 560.0 / 34},           // 20 steps of 1 s
		{80, 1.6, 640.0 / 84},         // 6 steps of 5 s fill 30 s
		{45, 8 * 20 / 6.5, 360.0 / 9}, // 15 fast steps and 5 slow in the window
	} {
		cur, avg := rates(t, lines[c.step-1])
		if math.Abs(cur-c.cur) > 0.006 || math.Abs(avg-c.avg) > 0.006 {
			t.Errorf("step %d: %g samples/s (avg %g), want %.2f (avg %.2f): %q", c.step, cur, avg, c.cur, c.avg, lines[c.step-1])
		}
	}
	if !strings.Contains(lines[79], "ETA 21s") { // 84 s for 80 steps, 20 to go
		t.Errorf("ETA in %q, want 21s", lines[79])
	}
}

// TestProgressRateSlowdown: a run whose steps sleep from halfway on shows a
// current rate no faster than the sleep allows once the window is past the
// change, far below the rate before it, and an average above it.
func TestProgressRateSlowdown(t *testing.T) {
	const steps, slow = 60, 25 * time.Millisecond
	cfg := testConfig(t.TempDir(), steps)
	cfg.Progress, cfg.LogEvery = "lines", 1
	tk := newTask(4, 8)
	tk.onStep = func(s StepInfo) {
		if s.Step >= steps/2 {
			time.Sleep(slow)
		}
	}
	var out bytes.Buffer
	if _, err := run(context.Background(), cfg, tk.hooks(), &out); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "step ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != steps {
		t.Fatalf("%d progress lines, want %d", len(lines), steps)
	}
	before, _ := rates(t, lines[steps/2-1])
	cur, avg := rates(t, lines[steps-1])
	bound := float64(tk.batch) / slow.Seconds()
	t.Logf("before %g samples/s, after %g (avg %g), the sleep allows %g", before, cur, avg, bound)
	if cur > 1.02*bound || cur < 0.2*bound {
		t.Errorf("current rate %g after the slowdown, the sleep allows at most %g", cur, bound)
	}
	if before < 2*cur || avg < 1.2*cur {
		t.Errorf("current rate %g before the slowdown, %g after, average %g: the current rate does not show it", before, cur, avg)
	}
}
