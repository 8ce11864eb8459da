package model

import (
	"fmt"
	"math"
	"slices"

	"dflash/flex"
	"dflash/tensor"
)

// Input is a batch of token sequences of equal length.
type Input struct {
	IDs   []int32 // [Batch, Len] row-major
	Batch int
	Len   int
	// Pos are the RoPE positions of every token ([Batch, Len]); nil means
	// 0..Len−1 for every sequence.
	Pos []int32
	// Docs, when not nil, are the document of every token ([Batch, Len]):
	// a row holds several sequences packed back to back, and a token
	// attends causally to the earlier tokens of its own document only
	// (flex.Document). Give each its positions from 0 in Pos.
	Docs []int32
	// States lists the hidden states to return, by HF index (0 = embeddings,
	// i = after layer i−1, NumLayers = final-normed; see the package doc).
	States []int
	// StatesOnly stops the pass at the deepest state in States: the layers
	// after it and the final norm do not run, and Output.Final is nil
	// (unless that state is NumLayers).
	StatesOnly bool
}

// Output is the result of Forward.
type Output struct {
	// Final is the final-normed hidden state [Batch·Len, Hidden], the LM
	// head's input (HF's hidden_states[NumLayers]).
	Final *tensor.Tensor
	// States maps each requested HF index to its hidden state [Batch·Len, Hidden].
	States map[int]*tensor.Tensor
}

// Positions returns 0..len−1 repeated for batch sequences.
func Positions(batch, length int) []int32 {
	pos := make([]int32, batch*length)
	for i := range pos {
		pos[i] = int32(i % length)
	}
	return pos
}

// Prepared is an Input on a backend: the token ids, the rotary table of the
// positions and the causal block mask, built once before a step (Prepare)
// so that the forward pass itself only runs ops.
type Prepared struct {
	Input
	ids  tensor.Ints
	rope *tensor.RopeTable[float32]
	mask tensor.Mask
}

// Prepare checks in and builds its Prepared on b. It panics on inconsistent
// input sizes (a programmer error).
func (m *Model) Prepare(b tensor.Backend[float32], in Input) *Prepared {
	c := &m.Config
	n := in.Batch * in.Len
	if n == 0 || len(in.IDs) != n {
		panic(fmt.Sprintf("model.Forward: %d ids for batch %d × len %d", len(in.IDs), in.Batch, in.Len))
	}
	pos := in.Pos
	if pos == nil {
		pos = Positions(in.Batch, in.Len)
	} else if len(pos) != n {
		panic(fmt.Sprintf("model.Forward: %d positions for %d tokens", len(pos), n))
	}
	for _, s := range in.States {
		if s < 0 || s > c.NumLayers {
			panic(fmt.Sprintf("model.Forward: hidden state %d out of range [0, %d]", s, c.NumLayers))
		}
	}
	if in.StatesOnly && len(in.States) == 0 {
		panic("model.Forward: StatesOnly without States")
	}
	d := flex.Dims{Batch: in.Batch, HeadsQ: c.NumHeads, HeadsKV: c.NumKVHeads, LenQ: in.Len, LenKV: in.Len, HeadDim: c.HeadDim}
	prog, args := flex.Causal(), flex.NewArgs()
	if in.Docs != nil {
		if len(in.Docs) != n {
			panic(fmt.Sprintf("model.Forward: %d document ids for %d tokens", len(in.Docs), n))
		}
		prog, args = flex.Document(true), flex.NewArgs().SetIntTensor(flex.DocIDs, in.Docs, in.Batch, in.Len)
	}
	mask, err := b.NewMask(prog, args, d)
	if err != nil {
		panic("model.Forward: " + prog.Name() + " block mask: " + err.Error())
	}
	return &Prepared{Input: in, ids: b.UploadInts(in.IDs), rope: tensor.Table(b, m.rope, pos), mask: mask}
}

// ForwardAttentions returns the attention calls of a forward pass
// (Forward), for tensor.Backend.Prepare: causal, or with docs (Input.Docs)
// causal within documents, over the config's head dimension and GQA group,
// without gradients (a target is frozen).
func (m *Model) ForwardAttentions(docs bool) []tensor.AttentionUse {
	return m.Config.ForwardAttentions(docs)
}

// ForwardAttentions returns the attention calls of the forward pass of a
// model of config c (Model.ForwardAttentions), known before its weights
// are loaded: a device compiles them while the weights load.
func (c *Config) ForwardAttentions(docs bool) []tensor.AttentionUse {
	mask := flex.Causal()
	if docs {
		mask = flex.Document(true)
	}
	return []tensor.AttentionUse{{Mask: mask, HeadDim: c.HeadDim, Group: c.NumHeads / c.NumKVHeads}}
}

// Forward runs the decoder on tp (record gradients with a training tape,
// none with an inference tape): Prepare on tp's backend, then
// ForwardPrepared. Attention is causal within each sequence. It panics on
// inconsistent input sizes (a programmer error).
func (m *Model) Forward(tp *tensor.Tape, in Input) *Output {
	return m.ForwardPrepared(tp, m.Prepare(tp.Backend(), in))
}

// ForwardPrepared runs the decoder on inputs prepared on tp's backend.
//
// Without gradients (an inference tape) each layer runs in a tensor.Scope
// of its own, released once its last residual add has written its output
// into one of two buffers used in turn, so that the pass holds one layer's
// activations at a time instead of every layer's (on the CPU a scope
// releases nothing, and the results are the same). A requested state that
// a later layer would overwrite is copied into a buffer of its own.
func (m *Model) ForwardPrepared(tp *tensor.Tape, in *Prepared) *Output {
	c, b := &m.Config, tp.Backend()
	want := map[int]bool{}
	for _, s := range in.States {
		want[s] = true
	}
	stop := c.NumLayers // layers to run
	if in.StatesOnly {
		stop = slices.Max(in.States)
	}
	out := &Output{States: map[int]*tensor.Tensor{}}
	att := func(q, k, v *tensor.Tensor) *tensor.Tensor {
		return tp.AttentionHeadsInner(q, k, v, in.mask, nil, 1/math.Sqrt(float64(c.HeadDim)))
	}
	x := tp.Embedding(m.Embed, in.ids)
	n := x.Numel()
	alloc := func(name string) *tensor.Tensor { return tensor.FromStorage(name, b.AllocOut(n), x.Shape...) }
	var turns [2]*tensor.Tensor // the layers' outputs without gradients
	if !tp.Recording() {
		turns = [2]*tensor.Tensor{alloc("layer_out"), alloc("layer_out")}
	}
	for i := range stop {
		if want[i] {
			out.States[i] = x
			if turns[0] != nil && i > 0 && i+1 < stop { // layer i+1 writes x's buffer
				s := alloc(fmt.Sprintf("hidden_states.%d", i))
				b.Copy2D(1, n, x.Store, n, 0, s.Store, n, 0, false)
				out.States[i] = s
			}
		}
		if turns[0] == nil {
			x = m.layer(tp, i, x, in.Batch, in.Len, in.rope, att, nil)
			continue
		}
		tensor.Scope(b, func() { x = m.layer(tp, i, x, in.Batch, in.Len, in.rope, att, turns[i%2]) })
	}
	if stop < c.NumLayers {
		out.States[stop] = x
		return out
	}
	out.Final = tp.RMSNorm(x, m.Norm, c.RMSNormEps)
	if want[c.NumLayers] {
		out.States[c.NumLayers] = out.Final
	}
	return out
}

// attnFn runs attention on q [B, Hq, L, D] and k, v [B, Hkv, Lkv, D] and
// returns its output [B, L, Hq, D] (tensor's AttentionHeadsInner).
type attnFn func(q, k, v *tensor.Tensor) *tensor.Tensor

// layer applies decoder layer i to x [B·L, H], writing the result into out
// (nil: a new tensor):
//
//	h = x + o_proj(attn(rope(norm_q(q_proj(n1(x)))), rope(norm_k(k_proj(n1(x)))), v_proj(n1(x))))
//	y = h + down(silu(gate(n2(h))) ⊙ up(n2(h)))
//
// with n1, n2 the layer's RMSNorms and norm_q, norm_k the per-head QK-norms (Qwen3).
func (m *Model) layer(tp *tensor.Tape, i int, x *tensor.Tensor, batch, length int, table *tensor.RopeTable[float32], att attnFn, out *tensor.Tensor) *tensor.Tensor {
	q, k, v := m.qkv(tp, i, x, batch, length, table)
	a := att(q, k, tp.Transpose12(v))
	return m.finishLayer(tp, i, x, a, out)
}

// qkv returns the normed (QK-norm where the model has it), rotated queries
// [B, Hq, L, D] and keys [B, Hkv, L, D], in attention's layout, and the
// values [B, L, Hkv, D]. Without biases the three projections are one GEMM
// over Span(Q, K, V), whose column blocks the QK-norms read in place.
func (m *Model) qkv(tp *tensor.Tape, i int, x *tensor.Tensor, batch, length int, table *tensor.RopeTable[float32]) (q, k, v *tensor.Tensor) {
	c, l := &m.Config, &m.Layers[i]
	if l.QB == nil && l.KB == nil && l.VB == nil { // with biases, QB lies between Q and K
		D := c.HeadDim
		w := tensor.Span(l.Q, l.K, l.V)
		h := tp.Recompute(tp.RMSNormFor(x, l.InputNorm, c.RMSNormEps, w))
		p := tp.Projections(h, w, c.NumHeads*D, c.NumKVHeads*D, c.NumKVHeads*D)
		q = tp.NormRoPEHeadsCols(p[0], batch, l.QNorm, c.RMSNormEps, table)
		k = tp.NormRoPEHeadsCols(p[1], batch, l.KNorm, c.RMSNormEps, table)
		v = tp.Reshape(tp.ConcatCols(batch, p[2]), batch, length, c.NumKVHeads, D)
		return q, k, v
	}
	h := tp.Recompute(tp.RMSNormFor(x, l.InputNorm, c.RMSNormEps, l.Q)) // K and V are of Q's kind
	q = tp.Reshape(tp.Linear(h, l.Q, l.QB), batch, length, c.NumHeads, c.HeadDim)
	k = tp.Reshape(tp.Linear(h, l.K, l.KB), batch, length, c.NumKVHeads, c.HeadDim)
	v = tp.Reshape(tp.Linear(h, l.V, l.VB), batch, length, c.NumKVHeads, c.HeadDim)
	return tp.NormRoPEHeads(q, l.QNorm, c.RMSNormEps, table), tp.NormRoPEHeads(k, l.KNorm, c.RMSNormEps, table), v
}

// finishLayer takes the attention output a [B, L, Hq, D] and returns the
// layer output, written into out unless out is nil.
func (m *Model) finishLayer(tp *tensor.Tape, i int, x, a, out *tensor.Tensor) *tensor.Tensor {
	c, l := &m.Config, &m.Layers[i]
	a = tp.Reshape(a, x.Rows(), c.NumHeads*c.HeadDim)
	h := tp.LinearAdd(a, l.O, l.OB, x, nil) // the residual adds are in the products' epilogues
	if out == nil && !tp.Recording() {
		out = h // h is read no more: the MLP adds into it
	}
	if l.GateB == nil && l.UpB == nil && l.DownB == nil { // with mlp_bias, GateB lies between Gate and Up
		w := tensor.Span(l.Gate, l.Up)
		return tp.MLP(tp.Recompute(tp.RMSNormFor(h, l.PostNorm, c.RMSNormEps, w)), w, l.Down, h, out)
	}
	n := tp.Recompute(tp.RMSNormFor(h, l.PostNorm, c.RMSNormEps, l.Gate)) // Up is of Gate's kind
	return tp.LinearAdd(tp.SwiGLU(tp.Linear(n, l.Gate, l.GateB), tp.Linear(n, l.Up, l.UpB)), l.Down, l.DownB, h, out)
}

// Logits returns final·LMHeadᵀ, [rows, Vocab]. For training prefer Loss,
// which never holds all logits at once.
func (m *Model) Logits(tp *tensor.Tape, final *tensor.Tensor) *tensor.Tensor {
	return tp.Linear(final, m.LMHead, nil)
}

// Loss returns the chunked cross-entropy of the LM head on final against
// targets (−1 = ignored) with optional per-row weights (see tensor.LMHeadXent).
func (m *Model) Loss(tp *tensor.Tape, final *tensor.Tensor, targets []int32, weights []float64, chunkRows int) *tensor.Xent[float32] {
	return tp.LMHeadXent(final, m.LMHead, targets, weights, chunkRows)
}

// NextTokenTargets returns, for ids [batch, length], the next-token targets
// of every position (−1 at the last position of each sequence).
func NextTokenTargets(ids []int32, batch, length int) []int32 {
	t := make([]int32, len(ids))
	for b := range batch {
		for i := range length {
			if i+1 < length {
				t[b*length+i] = ids[b*length+i+1]
			} else {
				t[b*length+i] = -1
			}
		}
	}
	return t
}
