package model

import (
	"fmt"
	"slices"
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

// TestDecodeRows checks the batched pass against one Decode per row: rows
// whose caches hold different numbers of positions, R = 1, 3 and 8, blocks
// of 1 and 5 tokens; the logits and hidden states agree within 1e-5 of
// their scale, and every row's cache then holds what its own Decode wrote
// (a further step on it matches).
func TestDecodeRows(t *testing.T) {
	rng := testseed.New(t)
	cpu := tensor.NewCPU[float32](0)
	for _, arch := range []Architecture{Qwen3, Llama} {
		m := perturbed(t, tinyConfig(arch, arch == Llama), rng.Uint64(), rng.Uint64())
		c := m.Config
		states := []int{0, 1, c.NumLayers}
		for _, R := range []int{1, 3, 8} {
			for _, n := range []int{1, 5} {
				t.Run(fmt.Sprintf("%s/R%d/n%d", arch, R, n), func(t *testing.T) {
					batched, single := make([]*Cache, R), make([]*Cache, R)
					var tokens []int32
					for r := range R {
						prefix := randIDs(rng, 1+rng.IntN(20), c.VocabSize)
						batched[r], single[r] = m.NewCache(cpu, 32), m.NewCache(cpu, 32)
						m.Step(cpu, batched[r], prefix)
						m.Step(cpu, single[r], prefix)
						tokens = append(tokens, randIDs(rng, n, c.VocabSize)...)
					}
					logits, hidden := m.DecodeRows(cpu, batched, tokens, states)
					if logits.Rows() != R*n {
						t.Fatalf("logits %v, want %d rows", logits, R*n)
					}
					V, H := c.VocabSize, c.HiddenSize
					for r := range R {
						wl, wh := m.Decode(cpu, single[r], tokens[r*n:(r+1)*n], states)
						backendtest.Close(t, fmt.Sprintf("row %d logits", r), logits.Data()[r*n*V:(r+1)*n*V], f64(wl.Data()), 1e-5)
						for _, s := range states {
							backendtest.Close(t, fmt.Sprintf("row %d hidden state %d", r, s), hidden[s].Data()[r*n*H:(r+1)*n*H], f64(wh[s].Data()), 1e-5)
						}
						if batched[r].Len != single[r].Len {
							t.Fatalf("row %d: cache length %d, its own Decode's %d", r, batched[r].Len, single[r].Len)
						}
						next := randIDs(rng, 2, V)
						got, want := m.Step(cpu, batched[r], next), m.Step(cpu, single[r], next)
						backendtest.Close(t, fmt.Sprintf("row %d step after the batch", r), got, f64(want), 1e-5)
					}
				})
			}
		}
	}
}

// TestGenerateBatch checks that each row of GenerateBatch is Generate of
// its prompt alone with seed Seed+r, greedily and sampling, for prompts of
// different lengths (one at the context limit, some reaching it) and a stop
// token.
func TestGenerateBatch(t *testing.T) {
	rng := testseed.New(t)
	cfg := tinyConfig(Qwen3, true)
	cfg.MaxPositionEmbeddings = 24
	m := perturbed(t, cfg, rng.Uint64(), rng.Uint64())
	cpu := tensor.NewCPU[float32](1)
	prompts := make([][]int32, 7)
	for i := range prompts {
		prompts[i] = randIDs(rng, 1+rng.IntN(cfg.MaxPositionEmbeddings), cfg.VocabSize)
	}
	prompts[0] = randIDs(rng, 1+rng.IntN(cfg.MaxPositionEmbeddings-1), cfg.VocabSize) // short of the limit: its output holds the stop token
	prompts[3] = randIDs(rng, cfg.MaxPositionEmbeddings, cfg.VocabSize)
	for _, o := range []GenerateOptions{{MaxNewTokens: 12}, {MaxNewTokens: 12, Temperature: 0.8, TopK: 20, Seed: rng.Uint64()}} {
		first, err := m.Generate(cpu, prompts[0], o)
		if err != nil {
			t.Fatal(err)
		}
		o.Stop = []int32{first[len(first)/2]} // inside row 0's output, perhaps in others'
		got, err := m.GenerateBatch(cpu, prompts, o)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range prompts {
			oi := o
			oi.Seed = o.Seed + uint64(i)
			want, err := m.Generate(cpu, p, oi)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[i], want) {
				t.Errorf("temperature %v, prompt %d (%d tokens): batched %v, alone %v", o.Temperature, i, len(p), got[i], want)
			}
		}
		if len(got[3]) != 0 || len(got[0]) == 0 || len(got[0]) > 12 {
			t.Errorf("temperature %v: %d tokens after a prompt at the context limit, %d after prompt 0", o.Temperature, len(got[3]), len(got[0]))
		}
	}
}

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}
