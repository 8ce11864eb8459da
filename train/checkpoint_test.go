package train

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dflash/tensor"
)

// testAdamW is the optimizer of the checkpoint tests.
var testAdamW = tensor.AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}

func saveSteps(t *testing.T, out string, tk *task, keep int, steps ...int) {
	t.Helper()
	params := mustParams(t, tk.m.arena, testAdamW)
	for _, s := range steps {
		for _, p := range tk.m.params() {
			p.Data()[0] = float32(s) // make each checkpoint's values tell its step
		}
		_, err := SaveCheckpoint(out, &Checkpoint{Config: []byte(`{"model_type":"t"}`), Params: params,
			State: TrainerState{Step: s, Seed: 42, RNG: []byte{1, 2, 3}}}, keep)
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	out := t.TempDir()
	tk := newTask(5, 8)
	saveSteps(t, out, tk, 0, 3, 6)
	want := snapshot(tk.m.params())
	l, err := LoadLatest(out)
	if err != nil {
		t.Fatal(err)
	}
	if l.State.Step != 6 || string(l.Config) != `{"model_type":"t"}` || string(l.State.RNG) != "\x01\x02\x03" {
		t.Fatalf("loaded %+v", l.State)
	}
	for _, f := range []string{ConfigFile, ModelFile, OptimizerTensorsFile, OptimizerStateFile} {
		if _, ok := l.State.Files[f]; !ok {
			t.Errorf("trainer_state.json does not list %s", f)
		}
	}
	fresh := newMLP(0, 4, 8)
	if err := mustParams(t, fresh.arena, testAdamW).Load(l.Dir); err != nil {
		t.Fatal(err)
	}
	assertSameBits(t, "params", want, snapshot(fresh.params()))
	if latest, _ := os.ReadFile(filepath.Join(out, LatestFile)); string(latest) != "checkpoint-6\n" {
		t.Errorf("latest %q", latest)
	}
	// Re-saving a step replaces it.
	saveSteps(t, out, tk, 0, 6)
	if steps, _ := listCheckpoints(out); len(steps) != 2 {
		t.Errorf("checkpoints %v after re-save", steps)
	}
	t.Run("load-values-errors", func(t *testing.T) {
		other := newMLP(0, 4, 9) // different hidden size
		if err := LoadValues(l.Dir, testCPU, other.arena); err == nil || !strings.Contains(err.Error(), `"layers.0.weight"`) {
			t.Errorf("shape mismatch: %v", err)
		}
		fewer := testArena("layers.0.weight", []int{8, 4}, "layers.0.bias", []int{8}, "head.weight", []int{1, 8})
		if err := LoadValues(l.Dir, testCPU, fewer); err == nil || !strings.Contains(err.Error(), "4 tensors, 3 parameters") {
			t.Errorf("extra tensor: %v", err)
		}
	})
}

func TestCheckpointKeep(t *testing.T) {
	out := t.TempDir()
	tk := newTask(5, 4)
	saveSteps(t, out, tk, 3, 1, 2, 3, 4, 5)
	steps, _ := listCheckpoints(out)
	if len(steps) != 3 || steps[0] != 5 || steps[2] != 3 {
		t.Fatalf("kept %v, want [5 4 3]", steps)
	}
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("leftover %s", e.Name())
		}
	}
}

// TestLoadLatestRecovery: leftovers of interrupted saves are removed, and a newest
// checkpoint that fails validation is skipped (with the reason) for the next one.
func TestLoadLatestRecovery(t *testing.T) {
	corruptions := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string
	}{
		{"flipped-byte", func(t *testing.T, dir string) {
			p := filepath.Join(dir, ModelFile)
			b, _ := os.ReadFile(p)
			b[len(b)-3] ^= 0x40
			os.WriteFile(p, b, 0o644)
		}, "crc32c"},
		{"truncated-optimizer", func(t *testing.T, dir string) {
			p := filepath.Join(dir, OptimizerTensorsFile)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
		}, "size"},
		{"missing-model", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ModelFile))
		}, ModelFile},
		{"torn-state", func(t *testing.T, dir string) {
			p := filepath.Join(dir, TrainerStateFile)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/3], 0o644)
		}, TrainerStateFile},
		{"renamed-dir", func(t *testing.T, dir string) {
			os.Rename(dir, filepath.Join(filepath.Dir(dir), "checkpoint-9"))
		}, "does not match"},
	}
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			tk := newTask(5, 4)
			saveSteps(t, out, tk, 0, 2, 4)
			os.MkdirAll(filepath.Join(out, tmpPrefix+"123", "x"), 0o755)
			os.WriteFile(filepath.Join(out, "."+LatestFile+".tmp-55"), []byte("x"), 0o644)
			c.damage(t, filepath.Join(out, "checkpoint-4"))
			l, err := LoadLatest(out)
			if err != nil {
				t.Fatal(err)
			}
			if l.State.Step != 2 {
				t.Fatalf("loaded step %d, want 2", l.State.Step)
			}
			if len(l.Skipped) != 1 || !strings.Contains(l.Skipped[0], c.want) {
				t.Fatalf("skipped %q, want one naming %q", l.Skipped, c.want)
			}
			ents, _ := os.ReadDir(out)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".") {
					t.Errorf("leftover %s not removed", e.Name())
				}
			}
		})
	}
	t.Run("none", func(t *testing.T) {
		if _, err := LoadLatest(t.TempDir()); !errors.Is(err, ErrNoCheckpoint) {
			t.Fatalf("err %v", err)
		}
		if _, err := LoadLatest(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, ErrNoCheckpoint) {
			t.Fatalf("absent dir: err %v", err)
		}
	})
	t.Run("all-invalid", func(t *testing.T) {
		out := t.TempDir()
		saveSteps(t, out, newTask(5, 4), 0, 1)
		os.Remove(filepath.Join(out, "checkpoint-1", ConfigFile))
		_, err := LoadLatest(out)
		if !errors.Is(err, ErrNoCheckpoint) || !strings.Contains(err.Error(), ConfigFile) {
			t.Fatalf("err %v", err)
		}
	})
}
