package model

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/tensor"
	"dflash/tensor/tensorcuda"
)

// TestGPUGoldenHF runs the targets of scripts/golden_hf_gpu.py (Qwen3 at
// head dim 128, Llama with biases and llama3 RoPE at 64; bf16 weights;
// 2 × 300 tokens) on the CUDA backend and compares every hidden state with
// transformers' float32 forward on CUDA. Our forward keeps bf16
// activations, as transformers' bf16 forward does, so its error is bounded
// by transformers' own bf16 error on the same state: at most twice that,
// plus 2⁻⁹ (one bf16 rounding) for the embeddings, which both store
// exactly. DFLASH_HF_GPU_GOLDEN names the script's output directory.
func TestGPUGoldenHF(t *testing.T) {
	dir := os.Getenv("DFLASH_HF_GPU_GOLDEN")
	if dir == "" {
		t.Skip("DFLASH_HF_GPU_GOLDEN is not set (scripts/golden_hf_gpu.py --out DIR writes it)")
	}
	w := gputest.Worker0(t)
	cache := gputest.NVRTCCache(t, "")
	for _, name := range []string{"qwen3-d128", "llama-d64"} {
		t.Run(name, func(t *testing.T) {
			m, err := Load(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			g := readGolden(t, filepath.Join(dir, name+".golden.safetensors"))
			ids := toIDs(g["ids"])
			const batch = 2
			L := m.Config.NumLayers
			states := make([]int, L+1)
			for i := range states {
				states[i] = i
			}
			got := make([][]float32, L+1)
			err = gputest.RunBackend(w, cache, tensorcuda.NewBackend, func(_ *gpu.Device, b *tensorcuda.Backend) error {
				m.Arena().Place(b, false)
				out := m.Forward(tensor.NewInference[float32](b), Input{IDs: ids, Batch: batch, Len: len(ids) / batch, States: states})
				for i := range states {
					got[i] = make([]float32, out.States[i].Numel())
					b.Download(out.States[i].Store, got[i])
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range states {
				want, hf := g["hidden_states."+strconv.Itoa(i)], g["hidden_states_bf16."+strconv.Itoa(i)]
				ours, theirs := relErr(got[i], want), relErr(hf, want)
				tol := 2*theirs + 1.0/512
				if ours > tol {
					t.Errorf("hidden state %d: error %.3g against float32, transformers' bf16 %.3g (bound %.3g)", i, ours, theirs, tol)
				} else {
					t.Logf("hidden state %d: error %.3g against float32, transformers' bf16 %.3g", i, ours, theirs)
				}
			}
		})
	}
}
