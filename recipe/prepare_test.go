package recipe_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"testing"

	"dflash/recipe"
	"dflash/tensor"
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
// target's forward and of the drafter's step before its first step, and a
// failure there is the rank's error before the output directory exists.
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
	want := []string{"mask causal, head dim 16, group 2, forward", "mask dflash4, head dim 16, group 2, forward and backward"}
	if !slices.Equal(uses, want) {
		t.Errorf("prepared %q, want %q", uses, want)
	}
}
