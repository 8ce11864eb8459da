package train

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"dflash/internal/tfevents/tfeventstest"
)

// tbPoint is one scalar as TensorBoard shows it.
type tbPoint struct {
	tag  string
	step int
}

// loadEvents reads the event files of dir in name order as TensorBoard's
// EventAccumulator does, dropping at each SessionLog START at step s every
// point read before it at step s or later, and returns the scalars left.
func loadEvents(t *testing.T, dir string) (map[tbPoint]float32, int) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, EventFiles))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths)
	got := map[tbPoint]float32{}
	for _, p := range paths {
		evs, torn, err := tfeventstest.ReadFile(p)
		if err != nil || torn {
			t.Fatalf("%s: torn %v, %v", p, torn, err)
		}
		if len(evs) == 0 || evs[0].FileVersion != "brain.Event:2" {
			t.Fatalf("%s does not start with the file version", p)
		}
		for _, e := range evs[1:] {
			if e.Start {
				for k := range got {
					if k.step >= int(e.Step) {
						delete(got, k)
					}
				}
			}
			for tag, v := range e.Scalars {
				got[tbPoint{tag, int(e.Step)}] = v
			}
		}
	}
	return got, len(paths)
}

// checkEventsMatchMetrics: the scalars TensorBoard shows for dir are exactly
// metrics.jsonl's values (float32), under <kind>/<name> at their steps.
func checkEventsMatchMetrics(t *testing.T, dir string) {
	t.Helper()
	got, _ := loadEvents(t, dir)
	recs, err := ReadMetrics(filepath.Join(dir, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	want := map[tbPoint]float32{}
	for _, r := range recs {
		for k, v := range r.Values {
			want[tbPoint{r.Kind + "/" + k, r.Step}] = float32(v)
		}
	}
	if len(want) < 10 {
		t.Fatalf("only %d metrics values", len(want))
	}
	for k, v := range want {
		g, ok := got[k]
		if !ok || math.Float32bits(g) != math.Float32bits(v) {
			t.Errorf("%s @ %d: event files have %g (present %v), metrics.jsonl %g", k.tag, k.step, g, ok, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s @ %d = %g is in the event files only", k.tag, k.step, v)
		}
	}
}

// TestEventFiles: a run writes one event per metrics record; a run killed
// after its last checkpoint (here: the newest checkpoint removed) and
// resumed opens a second file whose START drops the first file's points
// past the checkpoint, so that TensorBoard shows what metrics.jsonl holds.
func TestEventFiles(t *testing.T) {
	cfg := testConfig(t.TempDir(), 14)
	cfg.SaveEvery, cfg.KeepCheckpoints, cfg.EvalEvery = 4, 0, 5
	mustRun(t, context.Background(), cfg, newTask(5, 16).hooks())
	checkEventsMatchMetrics(t, cfg.Out)
	got, files := loadEvents(t, cfg.Out)
	if files != 1 {
		t.Fatalf("%d event files, want 1", files)
	}
	for _, k := range []tbPoint{{"train/loss", 14}, {"train/lr", 1}, {"train/tokens_per_s", 7}, {"eval/loss", 5}, {"eval/acc", 14}} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %s at step %d", k.tag, k.step)
		}
	}

	// Lose checkpoint 14 and the metrics past 12 become orphans.
	if err := os.RemoveAll(filepath.Join(cfg.Out, CheckpointName(14))); err != nil {
		t.Fatal(err)
	}
	before := got
	cfg.Resume = true
	mustRun(t, context.Background(), cfg, newTask(5, 16).hooks())
	checkEventsMatchMetrics(t, cfg.Out)
	after, files := loadEvents(t, cfg.Out)
	if files != 2 {
		t.Fatalf("%d event files after the resume, want 2", files)
	}
	if before[tbPoint{"train/loss", 12}] != after[tbPoint{"train/loss", 12}] {
		t.Error("the point at the checkpoint's step changed")
	}

	// A fresh run in a directory without checkpoints starts the curves
	// anew; without TensorBoard there are no event files.
	for _, tb := range []bool{true, false} {
		t.Run(fmt.Sprint("tensorboard=", tb), func(t *testing.T) {
			c := cfg
			c.Resume, c.TensorBoard = false, tb
			// The checkpoints go; the earlier runs' event files stay for the
			// fresh run to remove.
			ckpts, _ := filepath.Glob(filepath.Join(c.Out, checkpointPrefix+"*"))
			for _, p := range append(ckpts, filepath.Join(c.Out, LatestFile)) {
				if err := os.RemoveAll(p); err != nil {
					t.Fatal(err)
				}
			}
			mustRun(t, context.Background(), c, newTask(5, 16).hooks())
			_, files := loadEvents(t, c.Out)
			if want := map[bool]int{true: 1, false: 0}[tb]; files != want {
				t.Fatalf("%d event files, want %d", files, want)
			}
		})
	}
}
