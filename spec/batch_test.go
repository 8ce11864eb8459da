package spec

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// addInts returns a + b elementwise (a nil a: b's length).
func addInts(a, b []int) []int {
	if a == nil {
		a = make([]int, len(b))
	}
	for i, x := range b {
		a[i] += x
	}
	return a
}

// TestSamplingBatch checks that a sampled row does not depend on its
// batch: with a random DFlash drafter and fixed proposals, with and
// without top-k, each row of GenerateBatch of four prompts (different
// lengths, one near the context limit) is GenerateBatch of that prompt
// alone with seed Seed+r, tokens and statistics.
func TestSamplingBatch(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	cpu := tensor.NewCPU[float32](1)
	cfg := samplingConfig
	cfg.MaxPositionEmbeddings = 40 // a context limit the third prompt nears
	m, random := samplingModels(t, cfg, rng, cpu)
	fixed := &fixedQ{B: 3, taps: 0, logits: make([]float32, 3*cfg.VocabSize)}
	for i := range fixed.logits {
		fixed.logits[i] = float32(rng.NormFloat64())
	}
	prompts := [][]int32{{1}, {2, 3, 4, 5, 0}, make([]int32, 36), {5, 4, 3, 2, 1, 0, 1, 2, 3}}
	for j := range prompts[2] {
		prompts[2][j] = int32(rng.IntN(cfg.VocabSize))
	}
	for _, d := range []Drafter{random, fixed} {
		for _, topK := range []int{0, 3} {
			o := Options{MaxNewTokens: 16, Temperature: 1, TopK: topK, Seed: rng.Uint64()}
			outs, sts, err := GenerateBatch(context.Background(), cpu, m, d, prompts, o)
			if err != nil {
				t.Fatal(err)
			}
			rounds := 0
			for r, p := range prompts {
				or := o
				or.Seed = o.Seed + uint64(r)
				want, wst, err := GenerateBatch(context.Background(), cpu, m, d, [][]int32{p}, or)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(outs[r], want[0]) || !slices.Equal(sts[r].Histogram, wst[0].Histogram) {
					t.Errorf("%T, top-k %d, row %d: %v (histogram %v) in the batch, %v (%v) alone", d, topK, r, outs[r], sts[r].Histogram, want[0], wst[0].Histogram)
				}
				rounds += sts[r].Rounds
			}
			if rounds == 0 {
				t.Fatalf("%T, top-k %d: no rounds", d, topK)
			}
		}
	}
}
