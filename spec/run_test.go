package spec

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
)

// TestRunReport checks Run's report against the generations it passes on:
// token counts, rounds, the histogram's mean, and that greedy outputs match
// the baseline's.
func TestRunReport(t *testing.T) {
	rng := testseed.New(t)
	cpu := tensor.NewCPU[float32](2)
	m := loadTarget(t, "qwen3-tiny")
	d := randomDFlash(t, m, 1, 4, rng, cpu)
	var prompts [][]int32
	for range 3 {
		p := make([]int32, 2+rng.IntN(10))
		for j := range p {
			p[j] = int32(rng.IntN(m.Config.VocabSize))
		}
		prompts = append(prompts, p)
	}
	var first *Report
	for _, batch := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("batch", batch), func(t *testing.T) {
			r := checkRun(t, cpu, m, d, prompts, batch)
			if first == nil {
				first = r
			} else if !slices.Equal(r.Histogram, first.Histogram) || r.Speculative.Tokens != first.Speculative.Tokens {
				t.Fatalf("batch %d: histogram %v and %d tokens, at batch 1 %v and %d", batch, r.Histogram, r.Speculative.Tokens, first.Histogram, first.Speculative.Tokens)
			}
		})
	}
}

// checkRun runs Run at batch and checks its report against its generations.
func checkRun(t *testing.T, cpu tensor.Backend[float32], m *model.Model, d Drafter, prompts [][]int32, batch int) *Report {
	t.Helper()
	var gens []Generation
	r, err := Run(context.Background(), cpu, m, d, prompts, Options{MaxNewTokens: 12}, batch, true, func(g Generation) error {
		gens = append(gens, g)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	tokens, rounds, weighted, hist := 0, 0, 0, 0
	for i, g := range gens {
		if g.Index != i || len(g.Tokens) != 12 || !slices.Equal(g.Tokens, g.Baseline) {
			t.Fatalf("generation %d: %+v", i, g)
		}
		tokens += len(g.Tokens)
		rounds += g.Rounds
	}
	for n, c := range r.Histogram {
		weighted += (n + 1) * c
		hist += c
	}
	if len(gens) != 3 || r.Batch != batch || r.Speculative.Tokens != tokens || r.Baseline.Tokens != tokens || r.Rounds != rounds || hist != rounds || r.GreedyMatches != 3 {
		t.Fatalf("report %+v for generations %+v", r, gens)
	}
	if want := float64(weighted) / float64(rounds); r.AcceptanceLength != want || r.AcceptanceLength < 1 {
		t.Fatalf("acceptance length %v, histogram mean %v", r.AcceptanceLength, want)
	}
	if len(r.PositionAcceptance) != 3 || r.Speedup <= 0 {
		t.Fatalf("per position %v, speedup %v", r.PositionAcceptance, r.Speedup)
	}
	if r.DraftSeconds+r.VerifySeconds > r.Speculative.Seconds {
		t.Fatalf("drafting %vs and verification %vs exceed the wall time %vs", r.DraftSeconds, r.VerifySeconds, r.Speculative.Seconds)
	}
	return r
}

// TestCheckNamesFields checks that a drafter made for another target is
// refused with every mismatching field named.
func TestCheckNamesFields(t *testing.T) {
	q, l := loadTarget(t, "qwen3-tiny"), loadTarget(t, "llama-tiny")
	c := dflash.DrafterConfigFor(q, 1, []int{1}, 4, 3)
	if err := Check(q, c); err != nil {
		t.Fatalf("a matching drafter is refused: %v", err)
	}
	if err := Check(l, c); err == nil || !strings.Contains(err.Error(), "model_type") {
		t.Fatalf("a qwen3 drafter on a llama target: %v", err)
	}
	c.HiddenSize, c.VocabSize, c.NumTargetLayers, c.TargetLayerIDs = 32, 300, 5, []int{4}
	err := Check(q, c)
	if err == nil {
		t.Fatal("a mismatching drafter is accepted")
	}
	for _, f := range []string{"hidden_size 32", "vocab_size 300", "num_target_layers 5", "target_layer_ids[0] = 4"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not name %q", err, f)
		}
	}
}
