package dflash

import (
	"fmt"
	"math"
	"math/rand/v2"

	"dflash/flex"
	"dflash/tensor"
)

// Layer holds one drafter decoder layer's parameters.
type Layer[T tensor.Float] struct {
	InputNorm, Q, K, V, O, QNorm, KNorm, PostNorm, Gate, Up, Down *tensor.Of[T]
}

// Drafter is a DFlash drafter (docs/DRAFTER.md §2): fc + hidden_norm over
// the tapped target hidden states, N Qwen3-style layers with KV injection,
// and a final norm. Embedding and LM head are the target's (Head).
type Drafter[T tensor.Float] struct {
	Cfg        *Config
	FC         *tensor.Of[T]
	HiddenNorm *tensor.Of[T]
	Layers     []Layer[T]
	Norm       *tensor.Of[T]

	// LossChunk is the number of block slots whose logits exist at once
	// (≤ 0: tensor.LMHeadXent's default).
	LossChunk int
}

// Head is the target's frozen embedding E [V, H] and LM head W_lm [V, H]
// (the same tensor when the target ties them).
type Head[T tensor.Float] struct {
	Embed, LMHead *tensor.Of[T]
}

// New returns a drafter for c with fresh parameters: linear weights normal
// with std 0.02, norm weights 1. It panics on an invalid config.
func New[T tensor.Float](c *Config, rng *rand.Rand) *Drafter[T] {
	if err := c.Validate(); err != nil {
		panic("dflash: New: " + err.Error())
	}
	d := &Drafter[T]{Cfg: c}
	for _, p := range d.alloc() {
		if len(p.Shape) == 1 {
			p.Fill(1)
		} else {
			p.FillNormal(rng, 0, 0.02)
		}
	}
	return d
}

// alloc creates the parameter tensors (zero) and returns them in the order
// of Params.
func (d *Drafter[T]) alloc() []*tensor.Of[T] {
	c := d.Cfg
	H, I, D := c.HiddenSize, c.IntermediateSize, c.HeadDim
	d.FC = tensor.Param[T]("fc.weight", H, len(c.TargetLayerIDs)*H)
	d.HiddenNorm = tensor.Param[T]("hidden_norm.weight", H)
	d.Layers = make([]Layer[T], c.NumLayers)
	for l := range d.Layers {
		p := fmt.Sprintf("layers.%d.", l)
		d.Layers[l] = Layer[T]{
			InputNorm: tensor.Param[T](p+"input_layernorm.weight", H),
			Q:         tensor.Param[T](p+"self_attn.q_proj.weight", c.NumHeads*D, H),
			K:         tensor.Param[T](p+"self_attn.k_proj.weight", c.NumKVHeads*D, H),
			V:         tensor.Param[T](p+"self_attn.v_proj.weight", c.NumKVHeads*D, H),
			O:         tensor.Param[T](p+"self_attn.o_proj.weight", H, c.NumHeads*D),
			QNorm:     tensor.Param[T](p+"self_attn.q_norm.weight", D),
			KNorm:     tensor.Param[T](p+"self_attn.k_norm.weight", D),
			PostNorm:  tensor.Param[T](p+"post_attention_layernorm.weight", H),
			Gate:      tensor.Param[T](p+"mlp.gate_proj.weight", I, H),
			Up:        tensor.Param[T](p+"mlp.up_proj.weight", I, H),
			Down:      tensor.Param[T](p+"mlp.down_proj.weight", H, I),
		}
	}
	d.Norm = tensor.Param[T]("norm.weight", H)
	return d.Params()
}

// Params returns every trainable parameter, named as in docs/DRAFTER.md §6.1.
func (d *Drafter[T]) Params() []*tensor.Of[T] {
	ps := []*tensor.Of[T]{d.FC, d.HiddenNorm}
	for _, l := range d.Layers {
		ps = append(ps, l.InputNorm, l.Q, l.K, l.V, l.O, l.QNorm, l.KNorm, l.PostNorm, l.Gate, l.Up, l.Down)
	}
	return append(ps, d.Norm)
}

// Output is the result of a drafter forward pass over a batch.
type Output[T tensor.Float] struct {
	Loss      *tensor.Of[T] // [1], the weighted mean CE of §4.4 (0 without labels)
	WeightSum float64
	Pred      []int32         // [Rows*N*B] greedy predictions, −1 where there is no label
	CE        []float64       // [Rows*N*B] per-slot cross-entropy, 0 where there is no label
	Context   *tensor.Of[T]   // u [Rows*S, H]
	Hidden    []*tensor.Of[T] // block hidden states after each layer, [Rows*N*B, H]
}

// Forward runs the drafter on batch b with blocks bl and returns the loss
// and predictions. With train, tp must be a recording tape (tensor.NewTape)
// and the backward pass is recorded (call tp.Backward(out.Loss)); without,
// pass an inference tape (tensor.NewInference): recording is the tape's
// choice, so a recording tape records whatever train says.
func (d *Drafter[T]) Forward(tp *tensor.TapeOf[T], train bool, head Head[T], b *Batch, bl *Blocks) (*Output[T], error) {
	c := d.Cfg
	H, D, nh, nkv := c.HiddenSize, c.HeadDim, c.NumHeads, c.NumKVHeads
	k := len(c.TargetLayerIDs)
	b.Check(H, k)
	if bl.Rows != b.Rows || bl.B != c.BlockSize {
		panic(fmt.Sprintf("dflash: Forward: blocks %dx%dx%d for a batch of %d rows, block size %d", bl.Rows, bl.N, bl.B, b.Rows, c.BlockSize))
	}
	if head.Embed.Shape[0] != c.VocabSize || head.Embed.Shape[1] != H || head.LMHead.Shape[0] != c.VocabSize || head.LMHead.Shape[1] != H {
		panic(fmt.Sprintf("dflash: Forward: head %v / %v for vocab %d, hidden %d", head.Embed, head.LMHead, c.VocabSize, H))
	}
	R, S, nB := b.Rows, b.Len, bl.N*bl.B

	// Context features u = RMSNorm(fc(concat taps)), [R*S, H].
	ctx := tensor.New[T]("context", R*S, k*H)
	for t, h := range b.Hidden {
		for r := 0; r < R*S; r++ {
			dst := ctx.Data[r*k*H+t*H : r*k*H+(t+1)*H]
			for i, v := range h[r*H : (r+1)*H] {
				dst[i] = T(v)
			}
		}
	}
	u := tp.RMSNorm(tp.Linear(ctx, d.FC, nil), d.HiddenNorm, c.RMSNormEps)

	// Rotary tables: block rows at a+s, context rows at 0..S-1.
	rope, err := c.Rope()
	if err != nil {
		return nil, fmt.Errorf("dflash: config: %w", err)
	}
	qRope := tensor.Table[T](rope, bl.Pos)
	ctxPos := make([]int32, 0, R*S)
	for r := 0; r < R; r++ {
		for i := 0; i < S; i++ {
			ctxPos = append(ctxPos, int32(i))
		}
	}
	ctxRope := tensor.Table[T](rope, ctxPos)

	dims := flex.DFlashDims(R, nh, nkv, bl.N, bl.B, S, D)
	bm, err := flex.NewBlockMask(flex.DFlashMask(bl.B), flex.DFlashArgs(S, bl.Anchors, bl.N, bl.NumValid), dims, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("dflash: block mask: %w", err)
	}

	out := &Output[T]{Context: u}
	att := func(q, k, v *tensor.Of[T]) *tensor.Of[T] {
		return tp.Attention(q, k, v, bm, nil, bm.Args(), 1/math.Sqrt(float64(D)))
	}
	z := tp.Embedding(head.Embed, bl.IDs) // [R*nB, H]
	for l := range d.Layers {
		kc, vc := d.contextKV(tp, l, u, R, S, ctxRope)
		z = d.layer(tp, l, z, kc, vc, R, nB, qRope, att)
		out.Hidden = append(out.Hidden, z)
	}
	o := tp.RMSNorm(z, d.Norm, c.RMSNormEps)
	x := tp.LMHeadXent(o, head.LMHead, bl.Labels, bl.Weights, d.LossChunk)
	out.Loss, out.Pred, out.CE = x.Loss, x.Argmax, make([]float64, len(x.RowLoss))
	for i, l := range x.RowLoss {
		out.CE[i] = float64(l)
	}
	out.WeightSum = bl.WeightSum
	return out, nil
}

// contextKV returns layer l's keys and values of the context rows u
// [R*S, H] (§2.3: k_norm and RoPE at the context positions applied to the
// keys), each [R, S, n_kv*D]. Every row is computed on its own, so keys of
// a prefix of u are a prefix of the keys: inference caches them.
func (d *Drafter[T]) contextKV(tp *tensor.TapeOf[T], l int, u *tensor.Of[T], R, S int, ctxRope *tensor.RopeTable[T]) (k, v *tensor.Of[T]) {
	c, L := d.Cfg, &d.Layers[l]
	k = tp.Reshape(tp.Linear(u, L.K, nil), R*S, c.NumKVHeads, c.HeadDim)
	k = tp.RoPE(tp.RMSNorm(k, L.KNorm, c.RMSNormEps), ctxRope)
	return tp.Reshape(k, R, S, c.NumKVHeads*c.HeadDim), tp.Reshape(tp.Linear(u, L.V, nil), R, S, c.NumKVHeads*c.HeadDim)
}

// layer applies drafter layer l (§2.3) to the block hidden states z
// [R*nB, H] at the positions of qRope, with the context keys kc and values
// vc [R, S, n_kv*D] of contextKV and att, the attention of queries
// [R, nh, nB, D] over [context ; block] keys and values [R, n_kv, S+nB, D]
// (scale 1/√D; the mask is att's: flex with the DFlash block mask in
// training, all keys in inference).
func (d *Drafter[T]) layer(tp *tensor.TapeOf[T], l int, z, kc, vc *tensor.Of[T], R, nB int, qRope *tensor.RopeTable[T], att func(q, k, v *tensor.Of[T]) *tensor.Of[T]) *tensor.Of[T] {
	c, L := d.Cfg, &d.Layers[l]
	D, nh, nkv := c.HeadDim, c.NumHeads, c.NumKVHeads
	S := kc.Shape[1]
	g := tp.RMSNorm(z, L.InputNorm, c.RMSNormEps)
	q := tp.Reshape(tp.Linear(g, L.Q, nil), R*nB, nh, D)
	q = tp.RoPE(tp.RMSNorm(q, L.QNorm, c.RMSNormEps), qRope)
	q = tp.Transpose12(tp.Reshape(q, R, nB, nh, D)) // [R, nh, nB, D]

	kb := tp.Reshape(tp.Linear(g, L.K, nil), R*nB, nkv, D)
	kb = tp.RoPE(tp.RMSNorm(kb, L.KNorm, c.RMSNormEps), qRope)
	// [R, nkv, S+nB, D]: context rows then block rows.
	kk := tp.Transpose12(tp.Reshape(tp.Concat(1, kc, tp.Reshape(kb, R, nB, nkv*D)), R, S+nB, nkv, D))
	vb := tp.Reshape(tp.Linear(g, L.V, nil), R, nB, nkv*D)
	vv := tp.Transpose12(tp.Reshape(tp.Concat(1, vc, vb), R, S+nB, nkv, D))

	a := att(q, kk, vv)
	a = tp.Reshape(tp.Transpose12(a), R*nB, nh*D)
	z = tp.Add(z, tp.Linear(a, L.O, nil))
	g2 := tp.RMSNorm(z, L.PostNorm, c.RMSNormEps)
	return tp.Add(z, tp.Linear(tp.SwiGLU(tp.Linear(g2, L.Gate, nil), tp.Linear(g2, L.Up, nil)), L.Down, nil))
}
