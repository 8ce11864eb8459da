package spec

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/internal/testseed"
	"dflash/model"
	"dflash/tensor"
)

// tieGap is the largest gap between the target's two best logits at which a
// divergence from model.Generate counts as an argmax tie broken differently
// by verification's block-wide arithmetic (float32 GEMM vs one-row GEMV
// sums), not as a decoding error. Measured differences between the two
// paths are about 1e-6.
const tieGap = 1e-4

// TestGreedyLossless is the main test: on many random prompts, both test
// targets (Qwen3, Llama), a random DFlash drafter (mostly rejected drafts)
// and an oracle drafter (blocks accepted to every length), speculative
// greedy decoding returns the target's own greedy output token for token,
// including prompts ending at the context limit and stop tokens inside a
// block.
func TestGreedyLossless(t *testing.T) {
	seed := testseed.Seed(t)
	cpu := tensor.NewCPU[float32](2)
	prompts := 60
	if raceEnabled || testing.Short() {
		prompts = 6
	}
	for _, name := range []string{"qwen3-tiny", "llama-tiny"} {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(len(name))))
			m := loadTarget(t, name)
			m.Config.MaxPositionEmbeddings = 64 // a context limit the prompts reach
			random := randomDFlash(t, m, 2, 4, rng, cpu)
			err := lossless(t, cpu, m, random, rng, losslessCase{prompts: prompts, maxPrompt: 40, allLengths: !raceEnabled && !testing.Short(),
				oracle: func(i int, prompt, ref []int32) *oracle { return newOracle(t, m, prompt, ref, []int{0, 2}, 8, i, rng) },
				gap:    func(seq []int32) float64 { return topGap(m, cpu, seq) }, tie: tieGap})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// losslessCase is what TestGreedyLossless and TestGPUGreedyLossless set
// for lossless.
type losslessCase struct {
	prompts, maxPrompt int
	oracle             func(i int, prompt, ref []int32) *oracle // the oracle drafter of prompt i
	gap                func(seq []int32) float64                // the target's top-2 logit gap after seq
	tie                float64                                  // the largest gap of an argmax tie
	allLengths         bool                                     // every acceptance length 1..8 must occur
}

// lossless checks speculative greedy decoding on b with the drafter random
// and with c's oracle against m's own greedy output on c.prompts random
// prompts of up to c.maxPrompt tokens (some at the context limit or just
// below it, some with a stop token inside the output): token for token,
// but for argmax ties (a first difference where the target's top-2 gap is
// at most c.tie), in a quarter of the prompts at most. It returns the first
// error, and reports on t the acceptance lengths that the oracle missed.
func lossless(t *testing.T, b tensor.Backend[float32], m *model.Model, random Drafter, rng *rand.Rand, c losslessCase) error {
	limit, V := m.ContextLimit(), m.Config.VocabSize
	var rounds, ties int
	hist := make([]int, 8)
	for i := range c.prompts {
		n := 1 + rng.IntN(c.maxPrompt)
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
		orc := c.oracle(i, prompt, ref)
		for _, d := range []Drafter{random, orc} {
			got, st, err := Generate(context.Background(), b, m, d, prompt, o)
			if err != nil {
				return err
			}
			label := fmt.Sprintf("prompt %d (%d tokens, max %d, stop %v), block %d", i, n, maxNew, stop, d.BlockSize())
			if k := firstDiff(got, ref); k >= 0 {
				gap := c.gap(append(slices.Clone(prompt), ref[:k]...))
				if k >= len(got) || k >= len(ref) || gap > c.tie {
					return fmt.Errorf("%s: output differs from the target's greedy output at token %d (top-2 gap %.3g):\n got %v\nwant %v", label, k, gap, got, ref)
				}
				ties++
				t.Logf("%s: argmax tie at token %d (gap %.2g) broken differently", label, k, gap)
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
	for a := 1; a <= 8 && c.allLengths; a++ {
		if hist[a-1] == 0 {
			t.Errorf("no round accepted %d tokens: rollback of that length untested", a)
		}
	}
	if ties > c.prompts/4 {
		return fmt.Errorf("%d argmax ties in %d prompts: more than rounding explains", ties, c.prompts)
	}
	return nil
}

// firstDiff returns the first index where a and b differ (−1 if equal).
func firstDiff(a, b []int32) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return -1
}

// topGap returns the gap between the two largest next-token logits of the
// target after seq (a full forward pass).
func topGap(m *model.Model, b tensor.Backend[float32], seq []int32) float64 {
	tp := tensor.NewInference(b)
	l := m.Logits(tp, m.Forward(tp, model.Input{IDs: seq, Batch: 1, Len: len(seq)}).Final).Data()
	l = slices.Clone(l[len(l)-m.Config.VocabSize:])
	slices.Sort(l)
	return float64(l[len(l)-1] - l[len(l)-2])
}
