package model

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"dflash/safetensors"
	"dflash/tensor"
)

// The golden files under testdata/ come from HF transformers (5.17 on the GPU
// machine; see testdata/golden_hf.log). To regenerate them: here, write the
// directories this package saves,
//
//	go test ./model -run TestWriteGoSaved -gosave $PWD/.devbuild/gosave
//
// then on the GPU machine (carry .devbuild/gosave)
//
//	python3 scripts/golden_hf.py --go-saved .devbuild/gosave
//
// and unpack the golden.tar.gz it leaves in $OUT with tar xzf -C model/.
var goSave = flag.String("gosave", "", "TestWriteGoSaved: write HF dirs saved by this package, with our logits, under this directory")

// goldenTol bounds max|ours − HF| / max|HF| (float32 forwards on both sides).
const goldenTol = 1e-5

func readGolden(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatalf("%v (regenerate with scripts/golden_hf.py)", err)
	}
	defer f.Close()
	out := map[string][]float32{}
	for _, n := range f.Names() {
		if out[n], err = f.Float32(n); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func toIDs(v []float32) []int32 {
	ids := make([]int32, len(v))
	for i, x := range v {
		ids[i] = int32(x)
	}
	return ids
}

func relErr(got, want []float32) float64 {
	var worst, scale float64
	for i := range want {
		worst = math.Max(worst, math.Abs(float64(got[i])-float64(want[i])))
		scale = math.Max(scale, math.Abs(float64(want[i])))
	}
	return worst / scale
}

func TestGoldenHF(t *testing.T) {
	cpu := tensor.NewCPU[float32](0)
	for _, c := range []struct{ dir, golden string }{
		{"qwen3-tiny", "qwen3-tiny"},
		{"qwen3-tiny-sharded", "qwen3-tiny"},
		{"llama-tiny", "llama-tiny"},
	} {
		t.Run(c.dir, func(t *testing.T) {
			dir := filepath.Join("testdata", c.dir)
			if c.dir == "qwen3-tiny-sharded" {
				if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err != nil {
					t.Fatalf("sharded golden has no index: %v", err)
				}
			}
			m, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			g := readGolden(t, filepath.Join("testdata", c.golden+".golden.safetensors"))
			ids := toIDs(g["ids"])
			const batch = 2
			length := len(ids) / batch
			L := m.Config.NumLayers
			states := make([]int, L+1)
			for i := range states {
				states[i] = i
			}
			tp := tensor.NewInference(cpu)
			out := m.Forward(tp, Input{IDs: ids, Batch: batch, Len: length, States: states})
			logits := m.Logits(tp, out.Final)
			if e := relErr(logits.Data(), g["logits"]); e > goldenTol {
				t.Errorf("logits: relative error %.3g > %g", e, goldenTol)
			} else {
				t.Logf("logits: relative error %.3g", e)
			}
			for i := range states {
				want := g["hidden_states."+strconv.Itoa(i)]
				if want == nil {
					t.Fatalf("golden lacks hidden_states.%d", i)
				}
				if e := relErr(out.States[i].Data(), want); e > goldenTol {
					t.Errorf("hidden state %d: relative error %.3g > %g", i, e, goldenTol)
				}
			}
			// HF's last hidden state is the final norm of the last layer's output.
			last := tensor.FromData("last", g["layer_out_last"], batch*length, m.Config.HiddenSize)
			normed := tp.RMSNorm(last, m.Norm, m.Config.RMSNormEps)
			if e := relErr(normed.Data(), g["hidden_states."+strconv.Itoa(L)]); e > goldenTol {
				t.Errorf("hidden_states[L] is not norm(last layer output): relative error %.3g", e)
			}
			// Explicit position ids.
			outPos := m.Forward(tp, Input{IDs: ids, Batch: batch, Len: length, Pos: toIDs(g["pos"])})
			if e := relErr(m.Logits(tp, outPos.Final).Data(), g["logits_pos"]); e > goldenTol {
				t.Errorf("logits with explicit positions: relative error %.3g > %g", e, goldenTol)
			}
			// Greedy generation with the KV cache, up to the first near-tie in HF's scores.
			want, margins := toIDs(g["gen_tokens"]), g["gen_margins"]
			got, err := m.Generate(cpu, ids[:length], GenerateOptions{MaxNewTokens: len(want)})
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if margins[i] < 1e-3 {
					t.Logf("generation: stop comparing at step %d (HF margin %.2g)", i, margins[i])
					break
				}
				if got[i] != want[i] {
					t.Fatalf("generation step %d: token %d, HF %d (got %v, HF %v)", i, got[i], want[i], got, want)
				}
			}
		})
	}
	// Directories this package saved, loaded by transformers on the GPU
	// machine: its logits on them must match ours.
	for _, name := range []string{"go-qwen3", "go-llama"} {
		t.Run("saved/"+name, func(t *testing.T) {
			dir := filepath.Join("testdata", "gosaved", name)
			m, err := Load(dir)
			if err != nil {
				t.Fatalf("%v (regenerate with scripts/golden_hf.py --go-saved)", err)
			}
			g := readGolden(t, dir+".hf_logits.safetensors")
			ids := toIDs(g["ids"])
			tp := tensor.NewInference(cpu)
			logits := m.Logits(tp, m.Forward(tp, Input{IDs: ids, Batch: 2, Len: len(ids) / 2}).Final)
			if e := relErr(logits.Data(), g["logits"]); e > goldenTol {
				t.Errorf("transformers' logits on our saved %s: relative error %.3g > %g", name, e, goldenTol)
			} else {
				t.Logf("transformers' logits on our saved %s: relative error %.3g", name, e)
			}
		})
	}
}

// TestWriteGoSaved writes, when -gosave is given, tiny random Qwen3 and Llama
// models saved as HF directories, each with go_logits.safetensors (ids and
// the logits our forward computes after loading the directory back), for
// scripts/golden_hf.py --go-saved to load with transformers.
func TestWriteGoSaved(t *testing.T) {
	if *goSave == "" {
		t.Skip("no -gosave directory")
	}
	cpu := tensor.NewCPU[float32](0)
	for _, c := range []struct {
		name, dtype string
		cfg         Config
	}{
		{"go-qwen3", "F32", tinyConfig(Qwen3, true)},
		{"go-llama", "BF16", func() Config {
			c := tinyConfig(Llama, false)
			c.AttentionBias, c.MLPBias = true, true
			c.RopeTheta = 500000
			c.RopeScaling = &tensor.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64}
			return c
		}()},
	} {
		m := perturbed(t, c.cfg, 7, 3)
		dir := filepath.Join(*goSave, c.name)
		if err := m.Save(dir, c.dtype); err != nil {
			t.Fatal(err)
		}
		back, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int32, 2*7)
		for i := range ids {
			ids[i] = int32((i*37 + 5) % c.cfg.VocabSize)
		}
		tp := tensor.NewInference(cpu)
		logits := back.Logits(tp, back.Forward(tp, Input{IDs: ids, Batch: 2, Len: 7}).Final)
		fids := make([]float32, len(ids))
		for i, id := range ids {
			fids[i] = float32(id)
		}
		err = safetensors.Write(filepath.Join(dir, "go_logits.safetensors"), []safetensors.Tensor{
			{Name: "ids", Shape: []int{2, 7}, Data: fids},
			{Name: "logits", Shape: []int{2, 7, c.cfg.VocabSize}, Data: logits.Data()},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", dir)
	}
}
