package decodebench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"dflash/dtype"
	"dflash/internal/testseed"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
)

// tinyTarget is a Qwen3 shape small enough to run on the CPU in a test.
func tinyTarget(tied bool) model.Config {
	return model.Config{Arch: model.Qwen3, VocabSize: 97, HiddenSize: 32, IntermediateSize: 48, NumLayers: 6,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 8, RMSNormEps: 1e-6, RopeTheta: 1e4, MaxPositionEmbeddings: 256,
		TieWordEmbeddings: tied}
}

// hfTensor is one tensor of a checkpoint: its name and shape.
type hfTensor struct {
	name  string
	shape []int
}

// targetTensors lists the tensors of a Qwen3 checkpoint of c as HF writes
// them (model.safetensors.index.json of the Qwen3 repositories).
func targetTensors(c model.Config) []hfTensor {
	H, I, D := c.HiddenSize, c.IntermediateSize, c.HeadDim
	ts := []hfTensor{{"model.embed_tokens.weight", []int{c.VocabSize, H}}}
	for l := range c.NumLayers {
		ts = qwen3Layer(ts, fmt.Sprintf("model.layers.%d.", l), H, I, D, c.NumHeads, c.NumKVHeads)
	}
	ts = append(ts, hfTensor{"model.norm.weight", []int{H}})
	if !c.TieWordEmbeddings {
		ts = append(ts, hfTensor{"lm_head.weight", []int{c.VocabSize, H}})
	}
	return ts
}

// drafterLayerTensors lists the tensors of a drafter of dc (docs/DRAFTER.md
// §6.1) after fc and hidden_norm, which a proposal does not read.
func drafterLayerTensors(dc *dflash.Config) []hfTensor {
	H, I, D := dc.HiddenSize, dc.IntermediateSize, dc.HeadDim
	var ts []hfTensor
	for l := range dc.NumLayers {
		ts = qwen3Layer(ts, fmt.Sprintf("layers.%d.", l), H, I, D, dc.NumHeads, dc.NumKVHeads)
	}
	return append(ts, hfTensor{"norm.weight", []int{H}})
}

// qwen3Layer appends the tensors of a Qwen3 decoder layer named with
// prefix p (hidden H, intermediate I, heads and kvHeads of D) to ts.
func qwen3Layer(ts []hfTensor, p string, H, I, D, heads, kvHeads int) []hfTensor {
	return append(ts,
		hfTensor{p + "input_layernorm.weight", []int{H}},
		hfTensor{p + "self_attn.q_proj.weight", []int{heads * D, H}},
		hfTensor{p + "self_attn.k_proj.weight", []int{kvHeads * D, H}},
		hfTensor{p + "self_attn.v_proj.weight", []int{kvHeads * D, H}},
		hfTensor{p + "self_attn.o_proj.weight", []int{H, heads * D}},
		hfTensor{p + "self_attn.q_norm.weight", []int{D}},
		hfTensor{p + "self_attn.k_norm.weight", []int{D}},
		hfTensor{p + "post_attention_layernorm.weight", []int{H}},
		hfTensor{p + "mlp.gate_proj.weight", []int{I, H}},
		hfTensor{p + "mlp.up_proj.weight", []int{I, H}},
		hfTensor{p + "mlp.down_proj.weight", []int{H, I}})
}

func numel(shape []int) int64 {
	n := int64(1)
	for _, s := range shape {
		n *= int64(s)
	}
	return n
}

// TestPassBytesAgainstHFTensors counts, tensor by tensor from the HF
// lists, what each pass reads: the target's every tensor but the
// embedding (a tied LM head is the embedding: read whole, once), the
// drafter's layers and final norm and the LM head; and the keys and values
// of the attended positions, position by position. Every named target, a
// tiny one tied and untied, on both devices' element types.
func TestPassBytesAgainstHFTensors(t *testing.T) {
	shapes := map[string]model.Config{"tiny": tinyTarget(false), "tiny tied": tinyTarget(true)}
	for _, n := range TargetNames() {
		c, err := Target(n)
		if err != nil {
			t.Fatal(err)
		}
		shapes[n] = c
	}
	rng := testseed.New(t)
	for name, tc := range shapes {
		for _, device := range []string{"cpu", "cuda"} {
			t.Run(name+" "+device, func(t *testing.T) {
				o := Options{Device: device, Target: tc, Context: 1 + rng.IntN(200), BlockSize: 2 + rng.IntN(15), DrafterLayers: 1 + rng.IntN(5), Reps: 1}
				if err := o.Validate(); err != nil {
					t.Fatal(err)
				}
				w, kv := deviceDTypes(device)
				dc := drafterConfig(o)
				ps := passBytes(o, dc, w, kv)
				var target int64
				var lmHead []int
				for _, x := range targetTensors(tc) {
					switch {
					case x.name == "lm_head.weight":
						lmHead = x.shape
					case x.name == "model.embed_tokens.weight":
						if tc.TieWordEmbeddings {
							lmHead = x.shape
						}
						continue // gathered
					}
					target += numel(x.shape)
				}
				if tc.TieWordEmbeddings {
					target += numel(lmHead)
				}
				drafter := numel(lmHead)
				for _, x := range drafterLayerTensors(dc) {
					drafter += numel(x.shape)
				}
				// keys and values: per layer, kv head and position, 2 × head dim elements
				kvOf := func(layers, positions int) int64 {
					var n int64
					for range layers {
						for range tc.NumKVHeads {
							for range positions {
								n += 2 * int64(tc.HeadDim)
							}
						}
					}
					return n * int64(kv.Size())
				}
				want := map[string][2]int64{
					Decode:  {target * int64(w.Size()), kvOf(tc.NumLayers, o.Context+1)},
					Verify:  {target * int64(w.Size()), kvOf(tc.NumLayers, o.Context+o.BlockSize)},
					Propose: {drafter * int64(w.Size()), kvOf(o.DrafterLayers, o.Context+o.BlockSize)},
				}
				for _, p := range ps {
					if got := [2]int64{p.WeightBytes, p.KVBytes}; got != want[p.Name] || p.Bytes != p.WeightBytes+p.KVBytes {
						t.Errorf("%s: weights %d, kv %d, total %d bytes; the HF tensors give %d, %d", p.Name, p.WeightBytes, p.KVBytes, p.Bytes, want[p.Name][0], want[p.Name][1])
					}
				}
			})
		}
	}
}

// TestPassBytesAgainstModels: the weights the byte counts assume are the
// parameters the model and the drafter allocate (tiny shapes), and the
// target's keys and values those of a cache it allocates (model.Cache,
// whose Bytes tensor's tests check against its storage).
func TestPassBytesAgainstModels(t *testing.T) {
	rng := testseed.New(t)
	for _, tied := range []bool{false, true} {
		tc := tinyTarget(tied)
		o := Options{Device: "cpu", Target: tc, Context: 1 + rng.IntN(100), BlockSize: 2 + rng.IntN(8), DrafterLayers: 1 + rng.IntN(3), Reps: 1}
		m, err := model.New(tc, rng.Uint64())
		if err != nil {
			t.Fatal(err)
		}
		dc := drafterConfig(o)
		d := dflash.New[float32](dc, rand.New(rand.NewPCG(rng.Uint64(), 1)))
		var target, drafter int64
		for _, p := range m.Params() {
			if p != m.Embed || tied {
				target += int64(p.Numel())
			}
		}
		drafter = int64(m.LMHead.Numel())
		for _, p := range d.Params() {
			if p != d.FC && p != d.HiddenNorm {
				drafter += int64(p.Numel())
			}
		}
		cpu := tensor.NewCPU[float32](1)
		cache := m.NewCache(cpu, o.Context+o.BlockSize)
		ps := passBytes(o, dc, dtype.F32, cache.DType())
		want := map[string][2]int64{
			Decode:  {4 * target, cache.Bytes(o.Context + 1)},
			Verify:  {4 * target, cache.Bytes(o.Context + o.BlockSize)},
			Propose: {4 * drafter, 0},
		}
		for _, p := range ps {
			if w := want[p.Name]; p.WeightBytes != w[0] || p.Name != Propose && p.KVBytes != w[1] {
				t.Errorf("tied %v, %s: weights %d, kv %d bytes; the models' parameters and cache give %d, %d", tied, p.Name, p.WeightBytes, p.KVBytes, w[0], w[1])
			}
		}
		cache.Free()
	}
}

// TestQwen3_8BBounds checks the dry run at the Qwen3-8B shape on an H200
// (4.8 TB/s) against issue 27's estimates: about 15.1 GB of bf16 weights
// for a decode step and a verification (3.2 ms), about 0.67 ms for a
// proposal of the 5-layer drafter and the LM head.
func TestQwen3_8BBounds(t *testing.T) {
	tc, err := Target("qwen3-8b")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(Options{Device: "cuda", TargetName: "qwen3-8b", Target: tc, Context: DefaultContext, BlockSize: DefaultBlockSize,
		DrafterLayers: DefaultDrafterLayers, Reps: 1, HBMPeak: 4.8e12, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name              string
		weightsGB, lo, hi float64
	}{{Decode, 15.1, 3.1, 3.3}, {Verify, 15.1, 3.1, 3.3}, {Propose, 3.2, 0.62, 0.72}} {
		p := rep.Phase(c.name)
		if gb := float64(p.WeightBytes) / 1e9; math.Abs(gb-c.weightsGB) > 0.1 || !(c.lo < p.BoundMS && p.BoundMS < c.hi) {
			t.Errorf("%s: %.2f GB of weights, bound %.3f ms; want about %.1f GB, %.2f..%.2f ms", c.name, gb, p.BoundMS, c.weightsGB, c.lo, c.hi)
		}
	}
}
