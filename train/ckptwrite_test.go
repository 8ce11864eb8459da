package train

import (
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
