package model

import (
	"math/rand/v2"
)

// tinyConfig returns a small config of the given architecture.
func tinyConfig(a Architecture, tied bool) Config {
	bos := 1
	return Config{Arch: a, VocabSize: 97, HiddenSize: 32, IntermediateSize: 48, NumLayers: 2, NumHeads: 4, NumKVHeads: 2,
		HeadDim: 8, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 256, TieWordEmbeddings: tied,
		BOSTokenID: &bos, EOSTokenIDs: []int{2}}
}

// perturb gives norm weights and biases random values so that tests do not
// run on the ones and zeros of a fresh model.
func perturb(m *Model, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, p := range m.Params() {
		if len(p.Shape) == 1 {
			for i := range p.Data() {
				p.Data()[i] += float32(0.1 * rng.NormFloat64())
			}
		}
	}
}
