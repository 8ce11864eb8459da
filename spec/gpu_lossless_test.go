package spec

import (
	"context"
	"fmt"
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
// DFlash drafter on the GPU and an oracle drafter (blocks accepted to every
// length), prompts up to and at the context limit and stop tokens inside a
// block: speculative greedy decoding returns the target's own greedy
// decoding on the GPU token for token, but for ties within bf16 rounding.
func TestGPUGreedyLossless(t *testing.T) {
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
				m.Arena().Place(b, false)
				random.D.Arena().Place(b, false)
				random.Backend = b
				random.Head = dflash.HeadOf(m) // the target's embedding and head where they are now
				return gpuLossless(t, b, m, random, rng)
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func gpuLossless(t *testing.T, b tensor.Backend[float32], m *model.Model, random *DFlash, rng *rand.Rand) error {
	limit, V := m.ContextLimit(), m.Config.VocabSize
	const prompts = 24
	var rounds, ties int
	hist := make([]int, 8)
	for i := range prompts {
		n := 1 + rng.IntN(120)
		switch i % 6 {
		case 1:
			n = limit // no room for a token
		case 2:
			n = limit - 1 - rng.IntN(9) // the context limit falls inside a block
		}
		prompt := make([]int32, n)
		for j := range prompt {
			prompt[j] = int32(rng.IntN(V))
		}
		maxNew := 1 + rng.IntN(40)
		ref, err := m.Generate(b, prompt, model.GenerateOptions{MaxNewTokens: maxNew})
		if err != nil {
			return err
		}
		var stop []int32
		if i%3 == 0 && len(ref) > 4 { // a stop token that first appears mid-output
			stop = []int32{ref[2+rng.IntN(len(ref)-3)]}
			ref = ref[:slices.Index(ref, stop[0])+1]
		}
		o := Options{MaxNewTokens: maxNew, Stop: stop}
		// The oracle checks no hidden state here (no full forward on the CPU).
		orc := &oracle{t: t, seq: append(slices.Clone(prompt), ref...), taps: random.Taps(), B: 8, V: V, rng: rng, phase: i, fail: t.Errorf}
		for _, d := range []Drafter{random, orc} {
			got, st, err := Generate(context.Background(), b, m, d, prompt, o)
			if err != nil {
				return err
			}
			label := fmt.Sprintf("prompt %d (%d tokens, max %d, stop %v), block %d", i, n, maxNew, stop, d.BlockSize())
			if k := firstDiff(got, ref); k >= 0 {
				gap := gpuTopGap(m, b, append(slices.Clone(prompt), ref[:k]...))
				if k >= len(got) || k >= len(ref) || gap > gpuTieGap {
					return fmt.Errorf("%s: output differs from the target's greedy output at token %d (top-2 relative gap %.3g):\n got %v\nwant %v", label, k, gap, got, ref)
				}
				ties++
				t.Logf("%s: argmax tie at token %d (relative gap %.2g) broken differently", label, k, gap)
				continue
			}
			if st.Tokens != len(got) {
				return fmt.Errorf("%s: stats count %d tokens, %d generated", label, st.Tokens, len(got))
			}
			if d == Drafter(orc) {
				rounds += st.Rounds
				for a, c := range st.Histogram {
					hist[a] += c
				}
			}
		}
	}
	t.Logf("oracle: %d rounds, acceptance lengths 1..8: %v; %d argmax ties", rounds, hist, ties)
	for a := 1; a <= 8; a++ {
		if hist[a-1] == 0 {
			t.Errorf("no round accepted %d tokens: rollback of that length untested", a)
		}
	}
	if ties > prompts/4 {
		return fmt.Errorf("%d argmax ties in %d prompts: more than bf16 rounding explains", ties, prompts)
	}
	return nil
}

// gpuTopGap returns the gap between the two largest next-token logits after
// seq (a full forward pass on b) relative to the largest's magnitude (at
// least 1).
func gpuTopGap(m *model.Model, b tensor.Backend[float32], seq []int32) float64 {
	var l []float32
	tensor.Scope(b, func() {
		tp := tensor.NewInference(b)
		l = tensor.Values(b, m.Logits(tp, m.Forward(tp, model.Input{IDs: seq, Batch: 1, Len: len(seq)}).Final))
	})
	l = l[len(l)-m.Config.VocabSize:]
	slices.Sort(l)
	top := float64(l[len(l)-1])
	return (top - float64(l[len(l)-2])) / math.Max(1, math.Abs(top))
}
