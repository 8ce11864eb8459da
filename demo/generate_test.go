package demo

import (
	"context"
	"io"
	"math"
	"slices"
	"testing"

	"dflash/internal/testseed"
	"dflash/model"
	"dflash/tensor"
)

// TestGreedyBatched checks the batched generation against the target's own
// greedy decoding with a KV cache (model.Generate): a random Qwen3 with
// logits spread wide enough that float32 rounding breaks no tie, prompts of
// different lengths in batches of 4 (the last one short), a stop token, a
// token budget, and a prompt that reaches the context limit: the same
// responses token for token.
func TestGreedyBatched(t *testing.T) {
	rng := testseed.New(t)
	bos := 1
	c := model.Config{Arch: model.Qwen3, VocabSize: 48, HiddenSize: 32, IntermediateSize: 64, NumLayers: 2, NumHeads: 2, NumKVHeads: 1,
		HeadDim: 16, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 40, BOSTokenID: &bos, EOSTokenIDs: []int{2},
		InitializerRange: 1 / math.Sqrt(32)}
	m, err := model.New(c, rng.Uint64())
	if err != nil {
		t.Fatal(err)
	}
	var prompts [][]int32
	for _, n := range []int{3, 9, 1, 17, 5, 12, 38, 7, 4, 30} {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(3 + rng.IntN(c.VocabSize-3))
		}
		prompts = append(prompts, p)
	}
	const stop = 2
	o := Options{GenTokens: 12, GenBatch: 4, Progress: "off"}
	b := tensor.NewCPU[float32](0)
	got, err := greedyBatched(context.Background(), m, b, prompts, o, stop, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	stops := 0
	for i, p := range prompts {
		want, err := m.Generate(b, p, model.GenerateOptions{MaxNewTokens: o.GenTokens, Stop: []int32{stop}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got[i], want) {
			t.Errorf("prompt %d (%d tokens): batched %v, model.Generate %v", i, len(p), got[i], want)
		}
		if slices.Contains(want, stop) {
			stops++
		}
	}
	t.Logf("%d of %d responses end at the stop token", stops, len(prompts))
}
