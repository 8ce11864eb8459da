package dflash

import (
	"fmt"
	"math"
	"math/rand/v2"

	"dflash/tensor"
)

// Layer holds one drafter decoder layer's parameters.
type Layer[T tensor.Float] struct {
	InputNorm, Q, K, V, O, QNorm, KNorm, PostNorm, Gate, Up, Down *tensor.Of[T]
}

// Drafter is a DFlash drafter (docs/DRAFTER.md §2): fc + hidden_norm over
// the tapped target hidden states, N Qwen3-style layers with KV injection,
// and a final norm. Embedding and LM head are the target's (Head). The
// parameters are views of one flat buffer (Arena).
type Drafter[T tensor.Float] struct {
	Cfg        *Config
	FC         *tensor.Of[T]
	HiddenNorm *tensor.Of[T]
	Layers     []Layer[T]
	Norm       *tensor.Of[T]

	// LossChunk is the number of block slots whose logits exist at once
	// (≤ 0: tensor.LMHeadXent's default).
	LossChunk int

	arena *tensor.Arena[T]
	rp    *tensor.Rope // the rotary frequencies and their table of angles (rope)
}

// Head is the target's frozen embedding E [V, H] and LM head W_lm [V, H]
// (the same tensor when the target ties them).
type Head[T tensor.Float] struct {
	Embed, LMHead *tensor.Of[T]
}

// New returns a drafter for c with fresh parameters: linear weights normal
// with std 0.02, norm weights 1. It panics on an invalid config.
func New[T tensor.Float](c *Config, rng *rand.Rand) *Drafter[T] {
	d, fill := unfilled[T](c, rng)
	fill()
	return d
}

// NewAsync is New with the parameters' values made on another goroutine
// (a second or more for the 8B drafter's 1.05B, which a start spends
// reading the target beside them): the drafter's config, shapes and
// rotary table are there at once, its values, those New makes from the
// same rng, once ready has returned. rng is not used after NewAsync.
func NewAsync[T tensor.Float](c *Config, rng *rand.Rand) (d *Drafter[T], ready func()) {
	d, fill := unfilled[T](c, rng)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fill()
	}()
	return d, func() { <-done }
}

// unfilled returns a drafter for c with zero parameters and fill, which
// gives them New's values (their seeds drawn from rng here, in order).
func unfilled[T tensor.Float](c *Config, rng *rand.Rand) (*Drafter[T], func()) {
	if err := c.Validate(); err != nil {
		panic("dflash: New: " + err.Error())
	}
	d := &Drafter[T]{Cfg: c}
	d.rope() // made here, before any goroutine shares d
	ps := d.alloc()
	seeds := make([]uint64, len(ps))
	for i, p := range ps {
		if len(p.Shape) > 1 {
			seeds[i] = rng.Uint64()
		}
	}
	return d, func() {
		for i, p := range ps {
			if len(p.Shape) == 1 {
				p.Fill(1)
			} else {
				p.FillNormalSeeded(seeds[i], 0, 0.02)
			}
		}
	}
}

// alloc creates the parameter tensors (zero) as views of one arena and
// returns them in the order of Params.
func (d *Drafter[T]) alloc() []*tensor.Of[T] {
	c := d.Cfg
	H, I, D := c.HiddenSize, c.IntermediateSize, c.HeadDim
	a := &tensor.Arena[T]{}
	p := a.Param
	d.arena = a
	d.FC = p("fc.weight", H, len(c.TargetLayerIDs)*H)
	d.HiddenNorm = p("hidden_norm.weight", H)
	d.Layers = make([]Layer[T], c.NumLayers)
	for l := range d.Layers {
		n := func(s string) string { return fmt.Sprintf("layers.%d.%s", l, s) }
		d.Layers[l] = Layer[T]{
			InputNorm: p(n("input_layernorm.weight"), H),
			Q:         p(n("self_attn.q_proj.weight"), c.NumHeads*D, H),
			K:         p(n("self_attn.k_proj.weight"), c.NumKVHeads*D, H),
			V:         p(n("self_attn.v_proj.weight"), c.NumKVHeads*D, H),
			O:         p(n("self_attn.o_proj.weight"), H, c.NumHeads*D),
			QNorm:     p(n("self_attn.q_norm.weight"), D),
			KNorm:     p(n("self_attn.k_norm.weight"), D),
			PostNorm:  p(n("post_attention_layernorm.weight"), H),
			Gate:      p(n("mlp.gate_proj.weight"), I, H),
			Up:        p(n("mlp.up_proj.weight"), I, H),
			Down:      p(n("mlp.down_proj.weight"), H, I),
		}
	}
	d.Norm = p("norm.weight", H)
	a.Alloc()
	return d.Params()
}

// Params returns every trainable parameter, named as in docs/DRAFTER.md
// §6.1, in the order of the arena.
func (d *Drafter[T]) Params() []*tensor.Of[T] { return d.arena.Params() }

// Arena returns the flat buffer that holds every parameter (and, once
// allocated, every gradient) in the order of Params.
func (d *Drafter[T]) Arena() *tensor.Arena[T] { return d.arena }

// Output is the result of a drafter forward pass over a batch.
type Output[T tensor.Float] struct {
	Loss      *tensor.Of[T] // [1], the weighted mean CE of §4.4 (0 without labels)
	WeightSum float64
	Xent      *tensor.Xent[T] // the per-slot results, on the backend until Read
	Pred      []int32         // [Rows*N*B] greedy predictions, −1 where there is no label (after Read)
	CE        []float64       // [Rows*N*B] per-slot cross-entropy, 0 where there is no label (after Read)
	Context   *tensor.Of[T]   // u [Rows*S, H]
	Hidden    []*tensor.Of[T] // block hidden states after each layer, [Rows*N*B, H]
	// A tape that releases memory (ReleaseGrads) gives Context's and
	// Hidden's values back during Backward: read them after it only when
	// passed to tp.KeepValue before it.
}

// Forward runs the drafter on batch b with blocks bl and returns the loss
// and predictions: Inputs on tp's backend, ForwardInputs, then Read. With train, tp must be a
// recording tape (tensor.NewTape) and the backward pass is recorded (call
// tp.Backward(out.Loss)); without, pass an inference tape
// (tensor.NewInference): recording is the tape's choice, so a recording
// tape records whatever train says.
func (d *Drafter[T]) Forward(tp *tensor.TapeOf[T], train bool, head Head[T], b *Batch, bl *Blocks) (*Output[T], error) {
	in, err := d.Inputs(tp.Backend(), b, bl)
	if err != nil {
		return nil, err
	}
	out := d.ForwardInputs(tp, train, head, in)
	out.Read(tp.Backend())
	return out, nil
}

// ForwardInputs runs the drafter on inputs assembled by Inputs. Every step
// is an op on tp's backend: the taps are concatenated by an op, the rotary
// tables, block mask and loss rows come ready from in.
func (d *Drafter[T]) ForwardInputs(tp *tensor.TapeOf[T], train bool, head Head[T], in *StepInputs[T]) *Output[T] {
	c := d.Cfg
	H := c.HiddenSize
	if head.Embed.Shape[0] != c.VocabSize || head.Embed.Shape[1] != H || head.LMHead.Shape[0] != c.VocabSize || head.LMHead.Shape[1] != H {
		panic(fmt.Sprintf("dflash: Forward: head %v / %v for vocab %d, hidden %d", head.Embed, head.LMHead, c.VocabSize, H))
	}
	bl := in.Blocks
	R, S, nB := in.Batch.Rows, in.Batch.Len, bl.N*bl.B

	u := d.contextFeatures(tp, in.Taps)
	out := &Output[T]{Context: u}
	att := func(q, k, v *tensor.Of[T]) *tensor.Of[T] {
		return tp.AttentionHeadsInner(q, k, v, in.Mask, nil, 1/math.Sqrt(float64(c.HeadDim)))
	}
	z := tp.Embedding(head.Embed, in.IDs) // [R*nB, H]
	for l := range d.Layers {
		m := tp.BeginScope() // a layer's intermediates die in it, but those its backward reads
		kc, vc := d.contextKV(tp, l, u, R, S, in.CtxRope)
		z = d.layer(tp, l, z, kc, vc, R, nB, in.QRope, att)
		tp.EndScope(m, z)
		out.Hidden = append(out.Hidden, z)
	}
	o := tp.RMSNorm(z, d.Norm, c.RMSNormEps)
	out.Xent = tp.LMHeadXentRows(o, head.LMHead, in.Loss, d.LossChunk)
	out.Loss, out.WeightSum = out.Xent.Loss, bl.WeightSum
	return out
}

// Read fills Pred and CE from the backend b the forward pass ran on (on a
// device, it waits for the queued work).
func (o *Output[T]) Read(b tensor.Backend[T]) {
	ce, pred := o.Xent.Read(b)
	o.Pred, o.CE = pred, make([]float64, len(ce))
	for i, l := range ce {
		o.CE[i] = float64(l)
	}
}

// contextFeatures returns the context features u = RMSNorm(fc(concat
// taps)) [rows, H] (§2.1) of the target's hidden states at the taps, each
// [rows, H]; the concatenation is an op on tp's backend.
func (d *Drafter[T]) contextFeatures(tp *tensor.TapeOf[T], taps []*tensor.Of[T]) *tensor.Of[T] {
	return tp.Recompute(tp.RMSNorm(tp.Linear(tp.Concat(1, taps...), d.FC, nil), d.HiddenNorm, d.Cfg.RMSNormEps))
}

// contextKV returns layer l's keys [R, S, n_kv*D] and values (a block of
// R*S rows of n_kv*D of the product that made both) of the context rows u
// [R*S, H] (§2.3: k_norm and RoPE at the context positions applied to the
// keys): one product over Span(K, V), the keys normed in place. Every row
// is computed on its own, so keys of a prefix of u are a prefix of the
// keys: inference caches them.
func (d *Drafter[T]) contextKV(tp *tensor.TapeOf[T], l int, u *tensor.Of[T], R, S int, ctxRope *tensor.RopeTable[T]) (k *tensor.Of[T], v *tensor.Cols[T]) {
	c, L := d.Cfg, &d.Layers[l]
	kv := c.NumKVHeads * c.HeadDim
	p := tp.Projections(u, tensor.Span(L.K, L.V), kv, kv)
	k = tp.NormRoPECols(p[0], L.KNorm, c.RMSNormEps, ctxRope) // [R*S, n_kv*D]
	return tp.Reshape(k, R, S, kv), p[1]
}

// layer applies drafter layer l (§2.3) to the block hidden states z
// [R*nB, H] at the positions of qRope, with the context keys kc
// [R, S, n_kv*D] and values vc (R*S rows of n_kv*D) of contextKV and att,
// the attention of queries [R, nh, nB, D] over [context ; block] keys and
// values [R, n_kv, S+nB, D] (scale 1/√D; the mask is att's: flex with the
// DFlash block mask in training, all keys in inference), whose output is
// [R, nB, nh, D] (heads inner: merging them is a view). The block's
// queries, keys and values are one product over Span(Q, K, V), read in
// place by the ops that norm, rotate and place them.
func (d *Drafter[T]) layer(tp *tensor.TapeOf[T], l int, z, kc *tensor.Of[T], vc *tensor.Cols[T], R, nB int, qRope *tensor.RopeTable[T], att func(q, k, v *tensor.Of[T]) *tensor.Of[T]) *tensor.Of[T] {
	c := d.Cfg
	D, nkv := c.HeadDim, c.NumKVHeads
	S := kc.Shape[1]
	// The normed inputs of the projections are recomputed in the backward
	// pass, not kept (tensor.Recompute: z and rstd are kept anyway); g is
	// given back once q, k and v are made (EndScope).
	mg := tp.BeginScope()
	q, kb, vb := d.blockQKV(tp, l, z, R, qRope)
	// [R, nkv, S+nB, D]: context rows then block rows.
	kk := tp.Transpose12(tp.Reshape(tp.Concat(1, kc, tp.Reshape(kb, R, nB, nkv*D)), R, S+nB, nkv, D))
	vs := tp.ConcatCols(R, vc, vb) // [R, S+nB, nkv*D]
	tp.EndScope(mg, q, kk, vs)
	vv := tp.Transpose12(tp.Reshape(vs, R, S+nB, nkv, D))
	return d.layerOut(tp, l, z, att(q, kk, vv), R*nB)
}

// blockQKV returns the block's queries q [R, nh, nB, D], keys kb
// [R*nB, n_kv*D] (normed and rotated, heads inner) and values vb (R*nB
// rows of n_kv*D, a block of the product's columns) for layer l: one
// product over Span(Q, K, V), read in place by the ops that norm, rotate
// and place them.
func (d *Drafter[T]) blockQKV(tp *tensor.TapeOf[T], l int, z *tensor.Of[T], R int, qRope *tensor.RopeTable[T]) (q, kb *tensor.Of[T], vb *tensor.Cols[T]) {
	c, L := d.Cfg, &d.Layers[l]
	D, nh, nkv := c.HeadDim, c.NumHeads, c.NumKVHeads
	g := tp.Recompute(tp.RMSNorm(z, L.InputNorm, c.RMSNormEps))
	p := tp.Projections(g, tensor.Span(L.Q, L.K, L.V), nh*D, nkv*D, nkv*D)
	q = tp.NormRoPEHeadsCols(p[0], R, L.QNorm, c.RMSNormEps, qRope) // [R, nh, nB, D]
	kb = tp.NormRoPECols(p[1], L.KNorm, c.RMSNormEps, qRope)        // [R*nB, nkv*D]
	return q, kb, p[2]
}

// layerOut finishes layer l from the attention output a ([R, nB, nh, D]
// heads inner, rows = R·nB block rows): the output projection with the
// residual z, then the MLP with its residual.
func (d *Drafter[T]) layerOut(tp *tensor.TapeOf[T], l int, z, a *tensor.Of[T], rows int) *tensor.Of[T] {
	c, L := d.Cfg, &d.Layers[l]
	a = tp.Reshape(a, rows, c.NumHeads*c.HeadDim)
	z = tp.LinearAdd(a, L.O, nil, z, nil) // the residual adds are in the products' epilogues
	g2 := tp.Recompute(tp.RMSNorm(z, L.PostNorm, c.RMSNormEps))
	return tp.MLP(g2, tensor.Span(L.Gate, L.Up), L.Down, z, nil)
}
