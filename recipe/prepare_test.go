package recipe_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"dflash/internal/testlog"
	"dflash/recipe"
	"dflash/tensor"
	"dflash/train"
)

// unpreparable is the CPU backend with a Prepare that records its uses and
// fails as a kernel that does not compile would.
type unpreparable struct {
	tensor.Backend[float32]
	uses *[]string
	err  error
}

func (u unpreparable) Prepare(_ context.Context, uses []tensor.AttentionUse) error {
	for _, x := range uses {
		*u.uses = append(*u.uses, x.String())
	}
	return u.err
}

// TestPrepareFailureWritesNothing: a rank prepares the attention of the
// target's forward (within documents: batches are packed by default) and
// of the drafter's step before its first step, and a failure there is the
// rank's error before the output directory exists.
func TestPrepareFailureWritesNothing(t *testing.T) {
	s := tinySpec(t)
	var uses []string
	fail := errors.New("tensorcuda: prepare attention with mask dflash4: compiler log: error")
	err := recipe.TrainRankOn(context.Background(), s, unpreparable{tensor.NewCPU[float32](2), &uses, fail})
	if !errors.Is(err, fail) {
		t.Fatalf("the rank returned %v, want the Prepare error", err)
	}
	if _, err := os.Stat(s.Out); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a run whose kernels failed to prepare made %s (%v)", s.Out, err)
	}
	want := []string{"mask document_causal, head dim 16, group 2, forward", "mask dflash4, head dim 16, group 2, forward and backward"}
	if !slices.Equal(uses, want) {
		t.Errorf("prepared %q, want %q", uses, want)
	}
}

// TestRunRefusedBeyondMemory: a run whose step (target and drafter weights,
// the drafter's gradients and AdamW moments, activations) needs more memory
// than the host has is refused before any drafter is made, naming the sizes
// and the numbers, and writes nothing.
func TestRunRefusedBeyondMemory(t *testing.T) {
	s := tinySpec(t)
	defer recipe.SetAvailableMemory(func() (uint64, bool) { return 1 << 20, true })()
	_, err := recipe.Run(context.Background(), s)
	if err == nil {
		t.Fatal("a run needing more than 1 MiB accepted on a 1 MiB host")
	}
	for _, want := range []string{"config.json (vocab_size 300, hidden_size 32", "--data.batch-size 2 rows", "the step needs about",
		"drafter weights, gradients and AdamW moments", "more than the 1.0 MiB available (MemAvailable)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := os.Stat(s.Out); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused run made %s (%v)", s.Out, err)
	}
	defer recipe.SetAvailableMemory(func() (uint64, bool) { return 1 << 30, true })()
	if _, err := recipe.Run(context.Background(), s); err != nil {
		t.Fatalf("a run that fits in 1 GiB refused: %v", err)
	}
}

// TestRunEvalCache: a run keeps its evaluation batches' hidden states
// (logged once with their batches and size) and its evaluations equal
// those of a run with --data.cache-hidden, which keeps them on the host
// per conversation instead and logs no evaluation cache.
func TestRunEvalCache(t *testing.T) {
	evals := func(cacheHidden bool) ([]float64, string) {
		s := tinySpec(t)
		s.Steps, s.EvalEvery, s.Data.CacheHidden = 3, 1, cacheHidden
		log := testlog.Capture(t)
		if _, err := recipe.Run(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		recs, err := train.ReadMetrics(filepath.Join(s.Out, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		var losses []float64
		for _, r := range recs {
			if r.Kind == "eval" {
				losses = append(losses, r.Values["loss"])
			}
		}
		return losses, log.String()
	}
	got, log := evals(false)
	want, hostLog := evals(true)
	if n := strings.Count(log, `msg="eval cache" batches=`); n != 1 || !strings.Contains(log, "on=host") {
		t.Errorf("%d eval cache lines on the host, want 1:\n%s", n, log)
	}
	if strings.Contains(hostLog, "eval cache") {
		t.Errorf("a run with --data.cache-hidden logged an evaluation cache:\n%s", hostLog)
	}
	if len(got) != 3 || !slices.Equal(got, want) {
		t.Errorf("evaluation losses %v with the evaluation cache, %v with --data.cache-hidden (want 3, equal)", got, want)
	}
}

// TestRunFP8TargetRefused: --target-dtype fp8 is refused on the CPU, with
// a spec evaluation set (it would decode with the FP8 target), and for an
// unknown dtype, each naming the option, before anything is written.
func TestRunFP8TargetRefused(t *testing.T) {
	for _, c := range []struct {
		dtype, device string
		specEvery     int
		want          string
	}{
		{"fp8", "cpu", 0, "--target-dtype fp8: the FP8 target runs on cuda"},
		{"fp8", "cuda", 10, "--spec-eval-every 10 with --target-dtype fp8"},
		{"fp16", "cpu", 0, `--target-dtype "fp16": bf16 or fp8`},
	} {
		s := tinySpec(t)
		s.TargetDType, s.Device, s.SpecEvalEvery = c.dtype, c.device, c.specEvery
		_, err := recipe.Run(context.Background(), s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s on %s, spec every %d: %v, want %q", c.dtype, c.device, c.specEvery, err, c.want)
		}
		if _, err := os.Stat(s.Out); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a refused run made %s (%v)", s.Out, err)
		}
	}
}
