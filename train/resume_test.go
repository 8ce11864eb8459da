package train

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResumeChecks: --resume refuses an empty output directory and a checkpoint of
// another run (listing each differing identity entry), continues with
// ResumeAnyway, and resumes the same run bit-exactly.
func TestResumeChecks(t *testing.T) {
	const seed = 5
	id := map[string]string{"drafter.block-size": "16", "data": "sha256:aaaa", "tokenizer": "sha256:bbbb"}
	withID := func(tk *task, id map[string]string) Hooks {
		h := tk.hooks()
		h.Identity = id
		return h
	}
	t.Run("nothing-to-resume", func(t *testing.T) {
		cfg := testConfig(t.TempDir(), 4)
		cfg.Resume = true
		_, err := run(context.Background(), cfg, newTask(seed, 8).hooks(), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "nothing to resume from") || !strings.Contains(err.Error(), "no checkpoint") {
			t.Fatalf("err %v", err)
		}
		if _, err := os.Stat(filepath.Join(cfg.Out, MetricsFile)); !os.IsNotExist(err) {
			t.Fatalf("metrics written: %v", err)
		}
	})

	out := t.TempDir()
	cfg := testConfig(out, 8)
	cfg.Seed, cfg.StopAt = seed, 4
	mustRun(t, context.Background(), cfg, withID(newTask(seed, 8), id))
	cfg.StopAt, cfg.Resume = 0, true

	other := map[string]string{"drafter.block-size": "8", "data": "sha256:cccc", "tokenizer": "sha256:bbbb", "taps": "1,2"}
	_, err := run(context.Background(), cfg, withID(newTask(seed, 8), other), &bytes.Buffer{})
	for _, want := range []string{"checkpoint-4 belongs to another run", "drafter.block-size: checkpoint 16, now 8",
		"data: checkpoint sha256:aaaa, now sha256:cccc", "taps: checkpoint (not recorded), now 1,2", "--resume-anyway"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err %v lacks %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "tokenizer") {
		t.Errorf("an equal entry is listed: %v", err)
	}
	// A newer checkpoint skipped as corrupt is named beside the refusal of the older.
	newer := testConfig(t.TempDir(), 8)
	newer.Seed, newer.StopAt, newer.SaveEvery, newer.KeepCheckpoints = seed, 4, 2, 0
	mustRun(t, context.Background(), newer, withID(newTask(seed, 8), id))
	bad := filepath.Join(newer.Out, CheckpointName(4), "model.safetensors")
	if err := os.Truncate(bad, 10); err != nil {
		t.Fatal(err)
	}
	newer.StopAt, newer.Resume = 0, true
	_, err = run(context.Background(), newer, withID(newTask(seed, 8), other), &bytes.Buffer{})
	for _, want := range []string{"checkpoint-2 belongs to another run", "newer checkpoints, skipped as invalid:", CheckpointName(4)} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err %v lacks %q", err, want)
		}
	}
	_, err = run(context.Background(), cfg, newTask(seed, 8).hooks(), &bytes.Buffer{})
	if err != nil {
		t.Fatalf("a run without identity resumes anything: %v", err)
	}

	// A checkpoint that records no identity is refused when the run has one.
	old := testConfig(t.TempDir(), 4)
	old.StopAt = 2
	mustRun(t, context.Background(), old, newTask(seed, 8).hooks())
	old.StopAt, old.Resume = 0, true
	if _, err := run(context.Background(), old, withID(newTask(seed, 8), id), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "records no run identity") {
		t.Fatalf("old checkpoint: %v", err)
	}
	old.ResumeAnyway = true
	if res, err := run(context.Background(), old, withID(newTask(seed, 8), id), &bytes.Buffer{}); err != nil || res.StartStep != 2 {
		t.Fatalf("resume-anyway: %v", err)
	}

	// The same run resumes and matches an uninterrupted one bit for bit.
	straight := newTask(seed, 8)
	scfg := testConfig(t.TempDir(), 8)
	scfg.Seed = seed
	mustRun(t, context.Background(), scfg, straight.hooks())
	out2 := t.TempDir()
	cfg2 := testConfig(out2, 8)
	cfg2.Seed, cfg2.StopAt = seed, 3
	mustRun(t, context.Background(), cfg2, withID(newTask(seed, 8), id))
	cfg2.StopAt, cfg2.Resume = 0, true
	resumed := newTask(seed, 8)
	mustRun(t, context.Background(), cfg2, withID(resumed, id))
	assertSameBits(t, "params", snapshot(straight.m.params()), snapshot(resumed.m.params()))
}

// TestOutDirChecked: an output directory that cannot be created or written is an
// error before the first step.
func TestOutDirChecked(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(filepath.Join(file, "out"), 4)
	tk := newTask(1, 8)
	steps := 0
	tk.onStep = func(StepInfo) { steps++ }
	_, err := run(context.Background(), cfg, tk.hooks(), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "output directory") || steps != 0 {
		t.Fatalf("err %v after %d steps", err, steps)
	}
}

// TestOnlyCorruptCheckpoints: when every checkpoint of the output directory is
// corrupt, a run with and without --resume gives the same advice (which checkpoint,
// which file and why, remove it or choose another --out) instead of sending the user
// from one to the other; removing it as told lets a fresh run start. With one valid
// checkpoint left, the refusal without --resume names that one.
func TestOnlyCorruptCheckpoints(t *testing.T) {
	out := t.TempDir()
	cfg := testConfig(out, 8)
	cfg.SaveEvery, cfg.StopAt = 2, 4
	mustRun(t, context.Background(), cfg, newTask(3, 8).hooks())
	cfg.StopAt = 0
	// Flip a byte of the newest checkpoint's weights: checkpoint-2 is still valid.
	model := filepath.Join(out, CheckpointName(4), ModelFile)
	flipByte(t, model)
	_, err := run(context.Background(), cfg, newTask(3, 8).hooks(), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "newest valid: checkpoint-2): pass --resume") {
		t.Fatalf("one valid checkpoint left, without --resume: %v", err)
	}
	flipByte(t, filepath.Join(out, CheckpointName(2), ModelFile))
	want := []string{out + " holds no valid checkpoint: checkpoint-4, checkpoint-2 are corrupt (", model + ": size ",
		"nothing can resume from them: remove them (rm -r " + filepath.Join(out, CheckpointName(4)) + " " + filepath.Join(out, CheckpointName(2)) + ")",
		"or choose another --out"}
	for _, resume := range []bool{false, true} {
		cfg.Resume = resume
		_, err := run(context.Background(), cfg, newTask(3, 8).hooks(), &bytes.Buffer{})
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("resume %v: err %v lacks %q", resume, err, w)
			}
		}
		t.Logf("resume %v: %v", resume, err)
		if strings.Contains(err.Error(), "pass --resume") || strings.Contains(err.Error(), "without --resume") {
			t.Fatalf("resume %v: the advice sends the user to the other command: %v", resume, err)
		}
	}
	for _, s := range []int{2, 4} {
		if err := os.RemoveAll(filepath.Join(out, CheckpointName(s))); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Resume = false
	mustRun(t, context.Background(), cfg, newTask(3, 8).hooks())
}

// flipByte inverts the last byte of path.
func flipByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
