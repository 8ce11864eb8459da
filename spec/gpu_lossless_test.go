package spec

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
	"dflash/tensor/tensorcuda"
)

// TestMain lets the GPU tests run as a compiled test binary (gputest).
func TestMain(m *testing.M) { gputest.Main(m) }

// gpuTieGap is the relative gap between the target's two best logits (of
// the larger's magnitude, at least 1) below which a divergence from the
// target's own greedy decoding on the GPU counts as a tie broken
// differently by bf16 arithmetic of another shape (a block of rows against
// one), not as a decoding error.
const gpuTieGap = 2e-2

// TestGPUGreedyLossless is TestGreedyLossless on the CUDA backend: random
// Qwen3 and Llama targets of head dim 64 (group sizes 4 and 1), a random
// DFlash drafter on the GPU and oracle drafters (blocks accepted to every
// length), prompts up to and at the context limit and stop tokens inside a
// block: at batch 1, 3 and 8, speculative greedy decoding returns the
// target's own greedy decoding on the GPU token for token, but for ties
// within bf16 rounding; a row that differs from Generate of its prompt
// alone (products of another shape round otherwise) is logged, and must
// still be such a tie.
func TestGPUGreedyLossless(t *testing.T) {
	gpuLossless(t, func(t *testing.T, b tensor.Backend[float32], m *model.Model, random *DFlash, rng *rand.Rand) error {
		// The oracle checks no hidden state here (no full forward on the CPU).
		return lossless(t, b, m, random, rng, losslessCase{prompts: 24, maxPrompt: 120, batches: []int{1, 3, 8}, allLengths: true,
			oracle: func(i int, prompt, ref []int32) *oracle {
				return &oracle{t: t, seq: slices.Concat(prompt, ref), taps: random.Taps(), B: 8, V: m.Config.VocabSize, rng: rng, phase: i, fail: t.Errorf, lenient: true}
			},
			gap: func(seq []int32) float64 { return gpuGap(m, b, seq, 1) }, tie: gpuTieGap})
	})
}

// gpuLossless runs check on the CUDA backend for random Qwen3 and Llama
// targets of head dim 64 (group sizes 4 and 1) and a random DFlash drafter
// of blocks of 8, all placed on the GPU.
func gpuLossless(t *testing.T, check func(t *testing.T, b tensor.Backend[float32], m *model.Model, random *DFlash, rng *rand.Rand) error) {
	w, cache := gputest.Worker0Cache(t)
	seed := testseed.Seed(t)
	for _, c := range []struct {
		arch        model.Architecture
		heads, kv   int
		tied        bool
		layers, ffn int
	}{{model.Qwen3, 8, 2, true, 5, 512}, {model.Llama, 4, 4, false, 5, 384}} {
		t.Run(string(c.arch), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(len(c.arch))))
			bos := 1
			cfg := model.Config{Arch: c.arch, VocabSize: 512, HiddenSize: 256, IntermediateSize: c.ffn, NumLayers: c.layers,
				NumHeads: c.heads, NumKVHeads: c.kv, HeadDim: 64, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 160,
				TieWordEmbeddings: c.tied, BOSTokenID: &bos, EOSTokenIDs: []int{2}, InitializerRange: 1 / math.Sqrt(256)}
			m, err := model.New(cfg, rng.Uint64())
			if err != nil {
				t.Fatal(err)
			}
			random := randomDFlash(t, m, 2, 8, rng, nil)
			// t.Fatal ends the test's goroutine only: on the worker's, the
			// test returns an error instead.
			err = gputest.RunBackend(w, cache, tensorcuda.NewBackend, func(_ *gpu.Device, b *tensorcuda.Backend) error {
				placeOn(b, m, random)
				return check(t, b, m, random, rng)
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// gpuSamplingConfig is the target of TestGPUSamplingDistribution: the CPU
// test's 2 layers and peaked distributions over few tokens (8: 8⁴ cells of
// four tokens), at a head dimension the CUDA attention kernels take (64)
// and the GQA group of TestGPUGreedyLossless's Qwen3 (4); the weights'
// scale keeps the logits' spread of the CPU test's target (0.4·√16 ≈
// 0.14·√128).
var gpuSamplingConfig = model.Config{Arch: model.Qwen3, VocabSize: 8, HiddenSize: 128, IntermediateSize: 256, NumLayers: 2,
	NumHeads: 8, NumKVHeads: 2, HeadDim: 64, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 64,
	InitializerRange: 0.14}

// TestGPUSamplingDistribution is TestSamplingDistribution on the CUDA
// backend: the target and the random DFlash drafter decode on the GPU, and
// the exact distribution the runs are tested against comes from full
// forward passes on the same backend, so that bf16 rounding is on both
// sides (only the difference between the cached and the full forward's
// rounding is not).
func TestGPUSamplingDistribution(t *testing.T) {
	w, cache := gputest.Worker0Cache(t)
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 9))
	m, random := samplingModels(t, gpuSamplingConfig, rng, nil)
	runs := 5000
	if testing.Short() {
		runs = 1500
	}
	err := gputest.RunBackend(w, cache, tensorcuda.NewBackend, func(_ *gpu.Device, b *tensorcuda.Backend) error {
		placeOn(b, m, random)
		var errs []error
		// A prompt after which some reachable prefix has near-tied 3rd and
		// 4th logits would let bf16 rounding of the cached decode move a
		// token across the top-3 boundary (a draw of probability 0 to the
		// full forward): such prompts are drawn again.
		clear := func(prompt []int32) bool { return topKClear(m, b, prompt, 3, 4) }
		for _, c := range samplingCases(m, random, b, rng, clear) {
			errs = append(errs, checkSampling(t, b, m, c, runs, seed))
		}
		return errors.Join(errs...)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// placeOn moves target m and the DFlash drafter d onto b: their weights,
// the drafter's backend and its head (the target's embedding and LM head
// where they are now).
func placeOn(b tensor.Backend[float32], m *model.Model, d *DFlash) {
	m.Arena().Place(b, false)
	d.D.Arena().Place(b, false)
	d.Backend = b
	d.Head = dflash.HeadOf(m)
}

// gpuGap returns the gap between the k-th and (k+1)-th largest next-token
// logits after seq (a full forward pass on b) relative to the largest's
// magnitude (at least 1).
func gpuGap(m *model.Model, b tensor.Backend[float32], seq []int32, k int) float64 {
	var l []float32
	tensor.Scope(b, func() {
		tp := tensor.NewInference(b)
		l = tensor.Values(b, m.Logits(tp, m.Forward(tp, model.Input{IDs: seq, Batch: 1, Len: len(seq)}).Final))
	})
	l = l[len(l)-m.Config.VocabSize:]
	slices.Sort(l)
	top := float64(l[len(l)-1])
	return (float64(l[len(l)-k]) - float64(l[len(l)-k-1])) / math.Max(1, math.Abs(top))
}

// topKClear reports whether after prompt, and after every continuation of
// up to n-1 tokens among the top k at each step, the k-th and (k+1)-th
// largest logits are at least gpuTieGap apart: the top-k set is then the
// same under the cached decode's rounding as under the full forward's.
func topKClear(m *model.Model, b tensor.Backend[float32], prompt []int32, k, n int) bool {
	if gpuGap(m, b, prompt, k) < gpuTieGap {
		return false
	}
	if n == 1 {
		return true
	}
	var l []float32
	tensor.Scope(b, func() {
		tp := tensor.NewInference(b)
		l = tensor.Values(b, m.Logits(tp, m.Forward(tp, model.Input{IDs: prompt, Batch: 1, Len: len(prompt)}).Final))
	})
	l = l[len(l)-m.Config.VocabSize:]
	for x, p := range model.Probs(l, 1, k) {
		if p > 0 && !topKClear(m, b, append(prompt[:len(prompt):len(prompt)], int32(x)), k, n-1) {
			return false
		}
	}
	return true
}
