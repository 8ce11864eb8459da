package model

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"dflash/internal/atomicfile"
	"dflash/safetensors"
	"dflash/tensor"
)

// Layer holds one decoder layer's parameters (HF names in comments, under
// model.layers.N.). Bias fields are nil unless the config asks for biases;
// QNorm and KNorm are nil for Llama.
type Layer struct {
	InputNorm    *tensor.Tensor // input_layernorm.weight [H]
	Q, K, V, O   *tensor.Tensor // self_attn.{q,k,v,o}_proj.weight [out, in]
	QB, KB, VB   *tensor.Tensor // self_attn.{q,k,v}_proj.bias
	OB           *tensor.Tensor // self_attn.o_proj.bias
	QNorm, KNorm *tensor.Tensor // self_attn.{q,k}_norm.weight [head_dim] (Qwen3)
	PostNorm     *tensor.Tensor // post_attention_layernorm.weight [H]
	Gate, Up     *tensor.Tensor // mlp.{gate,up}_proj.weight [I, H]
	Down         *tensor.Tensor // mlp.down_proj.weight [H, I]
	GateB, UpB   *tensor.Tensor // mlp.{gate,up}_proj.bias (Llama mlp_bias)
	DownB        *tensor.Tensor // mlp.down_proj.bias
}

// Model is a Qwen3 or Llama decoder with its LM head. Its parameters are
// views of one flat buffer (Arena).
type Model struct {
	Config Config
	Embed  *tensor.Tensor // model.embed_tokens.weight [V, H]
	Layers []Layer
	Norm   *tensor.Tensor // model.norm.weight [H]
	// LMHead is lm_head.weight [V, H]; the same tensor as Embed when the
	// config ties word embeddings.
	LMHead *tensor.Tensor
	rope   *tensor.Rope
	arena  *tensor.Arena[float32]
}

// build allocates every parameter (zero, requiring gradients) with its HF
// name and shape, in HF order (see Params), as views of one arena in host
// memory, after checking that the host has the memory.
func build(c *Config) (*Model, error) {
	m, err := declare(c)
	if err != nil {
		return nil, err
	}
	if err := checkMemory(c); err != nil {
		return nil, err
	}
	m.arena.Alloc()
	return m, nil
}

// declare is build without the allocation: the arena's parameters are
// declared, and the caller allocates them (Arena.Alloc or AllocOn).
func declare(c *Config) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rope, err := tensor.NewRope(c.HeadDim, c.RopeTheta, c.RopeScaling)
	if err != nil {
		return nil, err
	}
	H, I, D := c.HiddenSize, c.IntermediateSize, c.HeadDim
	a := &tensor.Arena[float32]{}
	p := a.Param
	m := &Model{Config: *c, rope: rope, arena: a}
	m.Embed = p("model.embed_tokens.weight", c.VocabSize, H)
	for i := range c.NumLayers {
		n := func(s string) string { return fmt.Sprintf("model.layers.%d.%s", i, s) }
		var l Layer
		l.InputNorm = p(n("input_layernorm.weight"), H)
		l.Q = p(n("self_attn.q_proj.weight"), c.NumHeads*D, H)
		if c.AttentionBias {
			l.QB = p(n("self_attn.q_proj.bias"), c.NumHeads*D)
		}
		l.K = p(n("self_attn.k_proj.weight"), c.NumKVHeads*D, H)
		if c.AttentionBias {
			l.KB = p(n("self_attn.k_proj.bias"), c.NumKVHeads*D)
		}
		l.V = p(n("self_attn.v_proj.weight"), c.NumKVHeads*D, H)
		if c.AttentionBias {
			l.VB = p(n("self_attn.v_proj.bias"), c.NumKVHeads*D)
		}
		if c.Arch == Qwen3 {
			l.QNorm = p(n("self_attn.q_norm.weight"), D)
			l.KNorm = p(n("self_attn.k_norm.weight"), D)
		}
		l.O = p(n("self_attn.o_proj.weight"), H, c.NumHeads*D)
		if c.AttentionBias {
			l.OB = p(n("self_attn.o_proj.bias"), H)
		}
		l.PostNorm = p(n("post_attention_layernorm.weight"), H)
		mlpBias := c.MLPBias && c.Arch == Llama
		l.Gate = p(n("mlp.gate_proj.weight"), I, H)
		if mlpBias {
			l.GateB = p(n("mlp.gate_proj.bias"), I)
		}
		l.Up = p(n("mlp.up_proj.weight"), I, H)
		if mlpBias {
			l.UpB = p(n("mlp.up_proj.bias"), I)
		}
		l.Down = p(n("mlp.down_proj.weight"), H, I)
		if mlpBias {
			l.DownB = p(n("mlp.down_proj.bias"), H)
		}
		m.Layers = append(m.Layers, l)
	}
	m.Norm = p("model.norm.weight", H)
	if c.TieWordEmbeddings {
		m.LMHead = m.Embed
	} else {
		m.LMHead = p("lm_head.weight", c.VocabSize, H)
	}
	return m, nil
}

// Params returns every parameter once (a tied LM head is not repeated), in
// HF order: embeddings; per layer input norm, q (bias), k (bias), v (bias),
// q/k norms, o (bias), post-attention norm, gate (bias), up (bias), down
// (bias); final norm; LM head. It is the order of the arena.
func (m *Model) Params() []*tensor.Tensor { return m.arena.Params() }

// Matrices returns the layers' projection matrices, the products of the
// forward pass's weights (q, k, v, o, gate, up, down of every layer): what
// a frozen target may hold in FP8 (LoadOptions.FP8).
func (m *Model) Matrices() []*tensor.Tensor {
	var ws []*tensor.Tensor
	for i := range m.Layers {
		l := &m.Layers[i]
		ws = append(ws, l.Q, l.K, l.V, l.O, l.Gate, l.Up, l.Down)
	}
	return ws
}

// Arena returns the flat buffer that holds every parameter (and, once
// allocated, every gradient) in the order of Params.
func (m *Model) Arena() *tensor.Arena[float32] { return m.arena }

// NumParams returns the number of scalar parameters.
func (m *Model) NumParams() int {
	n := 0
	for _, p := range m.Params() {
		n += p.Numel()
	}
	return n
}

// ZeroGrad clears every parameter's gradient.
func (m *Model) ZeroGrad() { m.arena.ZeroGrad() }

// New returns a model with HF's initialisation: weights and embeddings drawn
// from N(0, InitializerRange²) (0.02 when unset), biases 0, norm weights 1;
// the same seed gives the same weights. Weights are drawn in chunks of
// initChunk values, each from its own random stream (seed, parameter,
// chunk), on every core: the same weights whatever the core count.
func New(c Config, seed uint64) (*Model, error) {
	if c.InitializerRange == 0 {
		c.InitializerRange = 0.02
	}
	m, err := build(&c)
	if err != nil {
		return nil, err
	}
	type chunk struct {
		data   []float32
		stream uint64
	}
	var work []chunk
	for i, p := range m.Params() {
		switch {
		case len(p.Shape) == 2:
			d := p.Data()
			for k := 0; k*initChunk < len(d); k++ {
				work = append(work, chunk{d[k*initChunk : min(len(d), (k+1)*initChunk)], uint64(i)<<32 | uint64(k)})
			}
		case isNorm(p.Name):
			p.Fill(1)
		}
	}
	var wg sync.WaitGroup
	next := make(chan chunk)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for ch := range next {
				rng := rand.New(rand.NewPCG(seed, 0x7a26e7^ch.stream))
				for j := range ch.data {
					ch.data[j] = float32(c.InitializerRange * rng.NormFloat64())
				}
			}
		})
	}
	for _, ch := range work {
		next <- ch
	}
	close(next)
	wg.Wait()
	return m, nil
}

// initChunk is the number of weights New draws from one random stream.
const initChunk = 1 << 20

func isNorm(name string) bool { return strings.HasSuffix(name, "norm.weight") }

// Save writes the model as an HF directory that transformers loads:
// config.json and model.safetensors (dtype "F32", "BF16" or "F16"; empty
// means F32). Each file is written atomically; dir is created if needed.
func (m *Model) Save(dir, dtype string) error {
	torchDType := map[string]string{"": "float32", "F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype]
	if torchDType == "" {
		return fmt.Errorf("model.Save: dtype %q not supported (want F32, BF16 or F16)", dtype)
	}
	cfg, err := m.Config.HFConfig(torchDType)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var ts []safetensors.Tensor
	for _, p := range m.Params() {
		ts = append(ts, safetensors.Tensor{Name: p.Name, Shape: p.Shape, DType: dtype, Data: p.Data()})
	}
	if err := safetensors.Write(filepath.Join(dir, safetensors.SingleFile), ts, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "config.json"), cfg)
}
