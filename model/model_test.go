package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/safetensors"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

func TestParseConfigErrors(t *testing.T) {
	base := `"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2`
	for _, c := range []struct{ name, json, want string }{
		{"unknown model_type", `{"model_type": "mistral", ` + base + `}`, `model_type "mistral"`},
		{"unknown architecture", `{"architectures": ["GPT2LMHeadModel"], ` + base + `}`, `GPT2LMHeadModel`},
		{"mismatched architecture", `{"model_type": "qwen3", "architectures": ["LlamaForCausalLM"], ` + base + `}`, `does not match`},
		{"no type", `{` + base + `}`, `model_type: missing`},
		{"missing field", `{"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2}`, `num_hidden_layers: missing`},
		{"wrong type", `{"model_type": "llama", ` + base + `, "rms_norm_eps": "small"}`, `rms_norm_eps`},
		{"fraction", `{"model_type": "llama", ` + strings.Replace(base, `"hidden_size": 8`, `"hidden_size": 8.5`, 1) + `}`, `hidden_size: 8.5 is not an integer`},
		{"heads", `{"model_type": "llama", ` + base + `, "num_key_value_heads": 3}`, `not a multiple of num_key_value_heads`},
		{"rope type", `{"model_type": "llama", ` + base + `, "rope_scaling": {"rope_type": "yarn", "factor": 2}}`, `rope_scaling.rope_type "yarn"`},
		{"rope params", `{"model_type": "llama", ` + base + `, "rope_parameters": {"rope_type": "dynamic"}}`, `rope_parameters.rope_type "dynamic"`},
		{"llama3 fields", `{"model_type": "llama", ` + base + `, "rope_scaling": {"rope_type": "llama3", "factor": 8}}`, `original_max_position_embeddings`},
		{"activation", `{"model_type": "llama", ` + base + `, "hidden_act": "gelu"}`, `hidden_act "gelu"`},
		{"odd head dim", `{"model_type": "llama", ` + base + `, "head_dim": 3}`, `head_dim 3`},
		{"not json", `{"model_type": `, `config.json`},
		{"sliding flag", `{"model_type": "qwen3", ` + base + `, "use_sliding_window": true, "sliding_window": 4096}`, `use_sliding_window true (sliding_window 4096)`},
		{"sliding layer", `{"model_type": "qwen3", ` + base + `, "layer_types": ["full_attention", "sliding_attention"], "sliding_window": 128}`, `layer_types[1] "sliding_attention" (sliding_window 128)`},
		{"rope theta conflict", `{"model_type": "qwen3", ` + base + `, "rope_theta": 10000, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000}}`, `rope_parameters.rope_theta 1e+06 differs from rope_theta 10000`},
		{"rope scaling conflict", `{"model_type": "llama", ` + base + `, "rope_scaling": {"rope_type": "linear", "factor": 2}, "rope_parameters": {"rope_type": "linear", "factor": 4, "rope_theta": 10000}}`, `rope_parameters {"rope_type":"linear","factor":4,"rope_theta":10000} differs from rope_scaling {"rope_type":"linear","factor":2}`},
		{"rope scaling and none", `{"model_type": "llama", ` + base + `, "rope_scaling": {"rope_type": "default"}, "rope_parameters": {"rope_type": "linear", "factor": 4}}`, `differs from rope_scaling`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.json))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestParseConfigWrongTypes checks that a value of the wrong JSON type is
// refused in words, for every kind of field ParseConfig reads: a number, an
// integer (top level and in rope_scaling), true or false, a string, a
// list, an integer or a list.
func TestParseConfigWrongTypes(t *testing.T) {
	base := `"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2`
	for _, c := range []struct{ field, want string }{
		{`"rope_theta": "abc"`, `rope_theta: "abc" is not a number`},
		{`"rms_norm_eps": true`, `rms_norm_eps: true is not a number`},
		{`"max_position_embeddings": "4096"`, `max_position_embeddings: "4096" is not an integer`},
		{`"bos_token_id": [1]`, `bos_token_id: [1] is not an integer`},
		{`"sliding_window": "none"`, `sliding_window: "none" is not an integer`},
		{`"rope_scaling": {"rope_type": "llama3", "factor": 8, "original_max_position_embeddings": "8192"}`, `rope_scaling.original_max_position_embeddings: "8192" is not an integer`},
		{`"rope_scaling": {"rope_type": "linear", "factor": "2"}`, `rope_scaling.factor: "2" is not a number`},
		{`"tie_word_embeddings": "yes"`, `tie_word_embeddings: "yes" is not true or false`},
		{`"use_sliding_window": 0`, `use_sliding_window: 0 is not true or false`},
		{`"hidden_act": 1`, `hidden_act: 1 is not a string`},
		{`"rope_scaling": {"rope_type": 3}`, `rope_scaling.rope_type: 3 is not a string`},
		{`"layer_types": "full_attention"`, `layer_types: "full_attention" is not a list of strings`},
		{`"architectures": "LlamaForCausalLM"`, `architectures: "LlamaForCausalLM" is not a list of strings`},
		{`"eos_token_id": "2"`, `eos_token_id: "2" is not an integer or a list of integers`},
	} {
		t.Run(c.field, func(t *testing.T) {
			_, err := ParseConfig([]byte(`{"model_type": "llama", ` + base + `, ` + c.field + `}`))
			if err == nil || err.Error() != c.want {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("kind of an unsupported type did not panic")
		}
	}()
	kind(new(float32))
}

func TestParseConfigForms(t *testing.T) {
	base := `"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2`
	v4, err := ParseConfig([]byte(`{"model_type": "llama", ` + base + `, "rope_theta": 500000, "rope_scaling": {"type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 64}, "eos_token_id": [2, 3]}`))
	if err != nil {
		t.Fatal(err)
	}
	v5, err := ParseConfig([]byte(`{"architectures": ["LlamaForCausalLM"], ` + base + `, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000, "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 64}, "eos_token_id": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	// Both forms at once, agreeing (as transformers 5 and our HFConfig write them).
	both, err := ParseConfig([]byte(`{"model_type": "llama", ` + base + `, "rope_theta": 500000, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 64}, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000, "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 64}, "layer_types": ["full_attention"], "sliding_window": 4096}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Config{v4, v5, both} {
		if c.RopeTheta != 500000 || c.RopeScaling == nil || *c.RopeScaling != (tensor.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64}) {
			t.Errorf("rope: theta %g scaling %+v", c.RopeTheta, c.RopeScaling)
		}
		if c.HeadDim != 4 || c.NumKVHeads != 2 || c.Arch != Llama {
			t.Errorf("defaults: %+v", c)
		}
	}
	if len(v4.EOSTokenIDs) != 2 || len(v5.EOSTokenIDs) != 1 {
		t.Errorf("eos ids %v, %v", v4.EOSTokenIDs, v5.EOSTokenIDs)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	for _, c := range []struct {
		dtype string
		tol   float64
		cfg   Config
	}{
		{"F32", 0, tinyConfig(Qwen3, true)},
		{"BF16", 1.0 / 128, tinyConfig(Llama, false)},
		{"F16", 1.0 / 1024, func() Config { c := tinyConfig(Llama, true); c.AttentionBias, c.MLPBias = true, true; return c }()},
	} {
		t.Run(string(c.cfg.Arch)+"-"+c.dtype, func(t *testing.T) {
			m := perturbed(t, c.cfg, 11, 5)
			dir := t.TempDir()
			if err := m.Save(dir, c.dtype); err != nil {
				t.Fatal(err)
			}
			back, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if back.Config.TieWordEmbeddings != c.cfg.TieWordEmbeddings || (back.LMHead == back.Embed) != c.cfg.TieWordEmbeddings {
				t.Fatalf("tied embeddings not preserved")
			}
			pa, pb := m.Params(), back.Params()
			if len(pa) != len(pb) {
				t.Fatalf("%d params saved, %d loaded", len(pa), len(pb))
			}
			for i := range pa {
				if pa[i].Name != pb[i].Name {
					t.Fatalf("param %d: %s vs %s", i, pa[i].Name, pb[i].Name)
				}
				for j, v := range pa[i].Data() {
					if d := math.Abs(float64(v - pb[i].Data()[j])); d > c.tol*math.Abs(float64(v))+1e-7 {
						t.Fatalf("%s[%d]: saved %g loaded %g", pa[i].Name, j, v, pb[i].Data()[j])
					}
				}
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	m, err := New(tinyConfig(Qwen3, false), 1)
	if err != nil {
		t.Fatal(err)
	}
	var writeWith func(t *testing.T, drop, reshape, asInt string) string
	write := func(t *testing.T, drop string, reshape string) string {
		return writeWith(t, drop, reshape, "")
	}
	writeWith = func(t *testing.T, drop, reshape, asInt string) string {
		dir := t.TempDir()
		if err := m.Save(dir, "F32"); err != nil {
			t.Fatal(err)
		}
		var ts []safetensors.Tensor
		for _, p := range m.Params() {
			if p.Name == drop {
				continue
			}
			shape := p.Shape
			if p.Name == reshape {
				shape = []int{p.Numel()}
			}
			if p.Name == asInt { // the same bytes, labelled I32
				raw := make([]byte, 4*p.Numel())
				for i, v := range p.Data() {
					binary.LittleEndian.PutUint32(raw[4*i:], uint32(int32(v*1000)))
				}
				ts = append(ts, safetensors.Tensor{Name: p.Name, Shape: shape, DType: "I32", Raw: raw})
				continue
			}
			ts = append(ts, safetensors.Tensor{Name: p.Name, Shape: shape, Data: p.Data()})
		}
		if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, c := range []struct {
		name string
		dir  func(t *testing.T) string
		want string
	}{
		{"missing tensor", func(t *testing.T) string { return write(t, "model.layers.1.self_attn.k_norm.weight", "") }, `tensor "model.layers.1.self_attn.k_norm.weight" is missing`},
		{"missing lm_head", func(t *testing.T) string { return write(t, "lm_head.weight", "") }, `tensor "lm_head.weight" is missing`},
		{"shape", func(t *testing.T) string { return write(t, "", "model.layers.0.mlp.up_proj.weight") }, `tensor "model.layers.0.mlp.up_proj.weight" has shape [1536]`},
		{"integer weight", func(t *testing.T) string { return writeWith(t, "", "", "model.layers.1.mlp.down_proj.weight") },
			`model.safetensors: tensor "model.layers.1.mlp.down_proj.weight" has dtype I32; a float weight is expected`},
		{"no config", func(t *testing.T) string { return t.TempDir() }, `config.json`},
		{"no weights", func(t *testing.T) string {
			dir := write(t, "", "")
			os.Remove(filepath.Join(dir, "model.safetensors"))
			return dir
		}, `model.safetensors`},
		{"bad architecture", func(t *testing.T) string {
			dir := write(t, "", "")
			os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "gpt2"}`), 0o644)
			return dir
		}, `model_type "gpt2"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.dir(t))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestCacheMatchesForward checks that Step with the KV cache (a prompt, then
// one token at a time) gives the logits of a full forward at every position.
func TestCacheMatchesForward(t *testing.T) {
	rng := testseed.New(t)
	cpu := tensor.NewCPU[float32](0)
	for _, arch := range []Architecture{Qwen3, Llama} {
		t.Run(string(arch), func(t *testing.T) {
			m := perturbed(t, tinyConfig(arch, arch == Qwen3), rng.Uint64(), rng.Uint64())
			ids := randIDs(rng, 11, m.Config.VocabSize)
			tp := tensor.NewInference(cpu)
			full := m.Logits(tp, m.Forward(tp, Input{IDs: ids, Batch: 1, Len: len(ids)}).Final)
			V := m.Config.VocabSize
			cache := m.NewCache(cpu, len(ids))
			const prompt = 4
			got := m.Step(cpu, cache, ids[:prompt])
			check := func(pos int, got []float32) {
				want := make([]float64, V)
				for i := range want {
					want[i] = float64(full.Data()[pos*V+i])
				}
				backendtest.Close(t, "logits at "+strconv.Itoa(pos), got, want, 1e-5)
			}
			check(prompt-1, got)
			for p := prompt; p < len(ids); p++ {
				check(p, m.Step(cpu, cache, ids[p:p+1]))
			}
			// Greedy generation equals argmax of full recomputation at each step.
			gen, err := m.Generate(cpu, ids[:3], GenerateOptions{MaxNewTokens: 6})
			if err != nil {
				t.Fatal(err)
			}
			seq := append([]int32(nil), ids[:3]...)
			for i := range gen {
				l := m.Logits(tp, m.Forward(tp, Input{IDs: seq, Batch: 1, Len: len(seq)}).Final)
				want := Sample(l.Data()[(len(seq)-1)*V:], 0, 0, nil)
				if gen[i] != want {
					t.Fatalf("generated token %d: %d, full forward argmax %d", i, gen[i], want)
				}
				seq = append(seq, want)
			}
		})
	}
}

func TestSample(t *testing.T) {
	rng := testseed.New(t)
	logits := []float32{0, 2, 1, 2, -1}
	if got := Sample(logits, 0, 0, rng); got != 1 {
		t.Fatalf("greedy: %d, want 1 (lowest id of the tie)", got)
	}
	// Temperature sampling follows softmax(logits/T); top-2 keeps ids 1 and 3.
	const n = 20000
	counts := make([]int, len(logits))
	for range n {
		counts[Sample(logits, 0.7, 2, rng)]++
	}
	if counts[0]+counts[2]+counts[4] != 0 || math.Abs(float64(counts[1])/n-0.5) > 0.02 {
		t.Fatalf("top-2 counts %v", counts)
	}
	counts = make([]int, len(logits))
	for range n {
		counts[Sample(logits, 1, 0, rng)]++
	}
	var z float64
	for _, l := range logits {
		z += math.Exp(float64(l))
	}
	for i, l := range logits {
		if p := math.Exp(float64(l)) / z; math.Abs(float64(counts[i])/n-p) > 0.02 {
			t.Errorf("token %d: frequency %.3f, probability %.3f", i, float64(counts[i])/n, p)
		}
	}
}

// TestStatesOnly checks that a pass stopped at the deepest requested state
// gives bit-identical states to the full pass, runs fewer ops and has no
// Final.
func TestStatesOnly(t *testing.T) {
	rng := testseed.New(t)
	cpu := tensor.NewCPU[float32](0)
	cfg := tinyConfig(Qwen3, true)
	cfg.NumLayers = 4
	m := perturbed(t, cfg, rng.Uint64(), rng.Uint64())
	const batch, length = 2, 9
	ids := randIDs(rng, batch*length, cfg.VocabSize)
	for _, states := range [][]int{{2}, {1, 3}, {0}, {2, 4}} {
		t.Run(fmt.Sprint(states), func(t *testing.T) {
			fullTape, partTape := tensor.NewTape(cpu), tensor.NewTape(cpu)
			full := m.Forward(fullTape, Input{IDs: ids, Batch: batch, Len: length, States: states})
			part := m.Forward(partTape, Input{IDs: ids, Batch: batch, Len: length, States: states, StatesOnly: true})
			if deepest := slices.Max(states); deepest < cfg.NumLayers {
				if part.Final != nil || partTape.Len() >= fullTape.Len() {
					t.Fatalf("deepest state %d of %d: Final %v, %d ops recorded, full pass %d", deepest, cfg.NumLayers, part.Final, partTape.Len(), fullTape.Len())
				}
			} else if part.Final == nil {
				t.Fatal("deepest state is the final norm but Final is nil")
			}
			for _, s := range states {
				a, b := full.States[s].Data(), part.States[s].Data()
				if len(a) != len(b) {
					t.Fatalf("state %d: %d values, full pass %d", s, len(b), len(a))
				}
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Fatalf("state %d [%d]: %v, full pass %v", s, i, b[i], a[i])
					}
				}
			}
		})
	}
}
