package model

import (
	"strconv"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestDecodeTruncate checks Decode and Cache.Truncate against full forward
// passes: a block's logits and hidden states at every position, then a
// rollback of part of the block and a different continuation.
func TestDecodeTruncate(t *testing.T) {
	rng := testseed.New(t)
	cpu := tensor.NewCPU[float32](0)
	for _, arch := range []Architecture{Qwen3, Llama} {
		t.Run(string(arch), func(t *testing.T) {
			m := perturbed(t, tinyConfig(arch, arch == Llama), rng.Uint64(), rng.Uint64())
			c := m.Config
			V, H := c.VocabSize, c.HiddenSize
			ids := randIDs(rng, 14, V)
			states := []int{1, c.NumLayers}
			full := func(seq []int32) (*tensor.Tensor, *Output) {
				tp := tensor.NewInference(cpu)
				out := m.Forward(tp, Input{IDs: seq, Batch: 1, Len: len(seq), States: states})
				return m.Logits(tp, out.Final), out
			}
			check := func(what string, got *tensor.Tensor, want *tensor.Tensor, from, rows, cols int) {
				t.Helper()
				w := make([]float64, rows*cols)
				for i := range w {
					w[i] = float64(want.Data()[from*cols+i])
				}
				backendtest.Close(t, what, got.Data(), w, 1e-5)
			}
			cache := m.NewCache(cpu, 16)
			m.Step(cpu, cache, ids[:5])
			logits, hidden := m.Decode(cpu, cache, ids[5:12], states)
			wantLogits, wantOut := full(ids[:12])
			check("block logits", logits, wantLogits, 5, 7, V)
			for _, s := range states {
				check("hidden state "+strconv.Itoa(s), hidden[s], wantOut.States[s], 5, 7, H)
			}
			// Keep 3 of the 7 block tokens, then continue with other tokens.
			cache.Truncate(8)
			if cache.Len != 8 {
				t.Fatalf("Len %d after Truncate(8)", cache.Len)
			}
			alt := append(append([]int32(nil), ids[:8]...), ids[12], ids[13], ids[0])
			logits, _ = m.Decode(cpu, cache, alt[8:], nil)
			wantLogits, _ = full(alt)
			check("logits after rollback", logits, wantLogits, 8, 3, V)
			if cache.Len != len(alt) {
				t.Fatalf("Len %d, want %d", cache.Len, len(alt))
			}
		})
	}
}

// TestGenerateContextLimit checks that generation stops at
// max_position_embeddings and that a longer prompt is refused.
func TestGenerateContextLimit(t *testing.T) {
	rng := testseed.New(t)
	cfg := tinyConfig(Qwen3, true)
	cfg.MaxPositionEmbeddings = 12
	m, err := New(cfg, rng.Uint64())
	if err != nil {
		t.Fatal(err)
	}
	cpu := tensor.NewCPU[float32](1)
	prompt := randIDs(rng, 13, cfg.VocabSize)
	for _, n := range []int{9, 11, 12} {
		out, err := m.Generate(cpu, prompt[:n], GenerateOptions{MaxNewTokens: 10})
		if err != nil || len(out) != 12-n {
			t.Fatalf("prompt %d: %d tokens (err %v), want %d", n, len(out), err, 12-n)
		}
	}
	if _, err := m.Generate(cpu, prompt, GenerateOptions{MaxNewTokens: 1}); err == nil {
		t.Fatal("a prompt past the context limit was accepted")
	}
}
