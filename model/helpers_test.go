package model

import (
	"math/rand/v2"
	"testing"
)

// tinyConfig returns a small config of the given architecture.
func tinyConfig(a Architecture, tied bool) Config {
	bos := 1
	return Config{Arch: a, VocabSize: 97, HiddenSize: 32, IntermediateSize: 48, NumLayers: 2, NumHeads: 4, NumKVHeads: 2,
		HeadDim: 8, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 256, TieWordEmbeddings: tied,
		BOSTokenID: &bos, EOSTokenIDs: []int{2}}
}

// partConfigs returns tiny configs with every optional part on and off:
// tied and untied heads, biases, QK-norm (Qwen3).
func partConfigs() []Config {
	biased := func(c Config) Config { c.AttentionBias, c.MLPBias = true, true; return c }
	return []Config{tinyConfig(Qwen3, true), tinyConfig(Qwen3, false), tinyConfig(Llama, false),
		biased(tinyConfig(Llama, true)), biased(tinyConfig(Qwen3, false))}
}

// randIDs returns n token ids drawn uniformly from [0, vocab).
func randIDs(rng *rand.Rand, n, vocab int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocab))
	}
	return ids
}

// perturbed returns New(c, seed) with random values (drawn from
// perturbSeed) added to its norm weights and biases, so that tests do not run
// on the ones and zeros of a fresh model.
func perturbed(t testing.TB, c Config, seed, perturbSeed uint64) *Model {
	t.Helper()
	m, err := New(c, seed)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(perturbSeed, 1))
	for _, p := range m.Params() {
		if len(p.Shape) == 1 {
			for i := range p.Data() {
				p.Data()[i] += float32(0.1 * rng.NormFloat64())
			}
		}
	}
	return m
}
