package tensor

import (
	"context"
	"fmt"
	"slices"

	"dflash/flex"
)

// AttentionUse is one kind of attention call that a run makes, told by
// what its kernels specialise on and never by a size: the mask and score
// programs, the head dimension, the GQA group and whether gradients flow
// back through it. A model says which it makes (model.Model's
// ForwardAttentions, model/dflash.Drafter's StepAttentions), so that a
// caller prepares them (Backend.Prepare) with no knowledge of the kernels.
type AttentionUse struct {
	Mask  *flex.MaskProgram
	Score *flex.ScoreProgram // nil: the identity
	// HeadDim is the head dimension; Group the query heads per kv head
	// (flex.Dims.Group).
	HeadDim, Group int
	// Backward is set when the backward pass runs too (AttentionBackward).
	Backward bool
}

// String names u as an error message does: its mask, score, head
// dimension, group and the directions it runs.
func (u AttentionUse) String() string {
	s := fmt.Sprintf("mask %s", u.Mask.Name())
	if u.Score != nil {
		s += fmt.Sprintf(", score %s", u.Score.Name())
	}
	dir := "forward"
	if u.Backward {
		dir = "forward and backward"
	}
	return s + fmt.Sprintf(", head dim %d, group %d, %s", u.HeadDim, u.Group, dir)
}

// Prepare does nothing: the CPU backend compiles no kernels.
func (c *CPU[T]) Prepare(context.Context, []AttentionUse) error { return nil }

// NewMask builds the block mask of mask program p with args for d on the CPU.
func (c *CPU[T]) NewMask(p *flex.MaskProgram, args *flex.Args, d flex.Dims) (Mask, error) {
	bm, err := flex.NewBlockMask(p, args, d, 0, 0)
	if err != nil {
		return nil, err
	}
	return HostMask{bm}, nil
}

// hostMask returns the flex block mask of a CPU mask.
func hostMask(m Mask) *flex.BlockMask {
	hm, ok := m.(HostMask)
	if !ok {
		panic(fmt.Sprintf("tensor: CPU attention given a %T, not a mask built by the CPU backend", m))
	}
	return hm.BlockMask
}

// Attention runs flex's CPU attention.
func (c *CPU[T]) Attention(d flex.Dims, q, k, v Storage[T], m Mask, score *flex.ScoreProgram, scale float64) (out, lse Storage[T]) {
	o, l := flex.Forward(d, HostData(q, "q"), HostData(k, "k"), HostData(v, "v"), hostMask(m), score, m.MaskArgs(), scale)
	return Host[T](o), Host[T](l)
}

// AttentionBackward runs flex's CPU attention backward pass and writes its
// gradients, or adds them with accumulate.
func (c *CPU[T]) AttentionBackward(d flex.Dims, q, k, v, out, lse, dout Storage[T], m Mask, score *flex.ScoreProgram, scale float64, dq, dk, dv Storage[T], accumulate bool) {
	g := flex.Backward(d, HostData(q, "q"), HostData(k, "k"), HostData(v, "v"), HostData(out, "out"), HostData(lse, "lse"),
		HostData(dout, "dout"), hostMask(m), score, m.MaskArgs(), scale)
	for _, p := range []struct {
		dst Storage[T]
		g   []T
	}{{dq, g.DQ}, {dk, g.DK}, {dv, g.DV}} {
		switch {
		case p.dst == nil:
		case accumulate:
			c.Axpy(1, Host[T](p.g), p.dst)
		default:
			copy(HostData(p.dst, "attention gradient"), p.g)
		}
	}
}

// AttentionDims returns the flex dimensions of q [B, Hq, Lq, D] and k [B, Hkv, Lkv, D].
func AttentionDims[T Float](q, k *Of[T]) flex.Dims {
	if len(q.Shape) != 4 || len(k.Shape) != 4 || q.Shape[0] != k.Shape[0] || q.Shape[3] != k.Shape[3] {
		panic(fmt.Sprintf("tensor.Attention: q %v and k %v are not [batch, heads, len, headDim] alike", q, k))
	}
	return flex.Dims{Batch: q.Shape[0], HeadsQ: q.Shape[1], HeadsKV: k.Shape[1], LenQ: q.Shape[2], LenKV: k.Shape[2], HeadDim: q.Shape[3]}
}

// Attention computes flex attention: for query i of head h (kv head
// g = h/(Hq/Hkv)), with s_j = score(scale·q_i·k_j) over the keys j the mask
// allows, out_i = Σ_j softmax(s)_j·v_j (0 when no key is allowed).
// q and out are [B, Hq, Lq, D]; k and v are [B, Hkv, Lkv, D]; m is built by
// the tape's backend for AttentionDims(q, k), and the score program reads
// the mask's arguments. Gradients (P the softmax, dS = P⊙(dP − rowsum(dO⊙O))):
// dv = Pᵀ·dO, dq = scale·dS·k, dk = scale·dSᵀ·q. Gradients of tensors read
// by the score program are not propagated.
func (tp *TapeOf[T]) Attention(q, k, v *Of[T], m Mask, score *flex.ScoreProgram, scale float64) *Of[T] {
	return tp.attention(q, k, v, m, score, scale, false)
}

// AttentionHeadsInner is Attention with out (and so its gradient) laid out
// [B, Lq, Hq, D], the heads inside the query rows: merging the heads,
// Reshape(out, B·Lq, Hq·D), is then a view, not a transpose (the kernels
// store and read that layout directly, flex.Dims.OutHeadsInner).
func (tp *TapeOf[T]) AttentionHeadsInner(q, k, v *Of[T], m Mask, score *flex.ScoreProgram, scale float64) *Of[T] {
	return tp.attention(q, k, v, m, score, scale, true)
}

func (tp *TapeOf[T]) attention(q, k, v *Of[T], m Mask, score *flex.ScoreProgram, scale float64, headsInner bool) *Of[T] {
	d := AttentionDims(q, k)
	if !slices.Equal(k.Shape, v.Shape) {
		panic(fmt.Sprintf("tensor.Attention: k %v and v %v differ", k, v))
	}
	if err := d.Check(); err != nil {
		panic("tensor.Attention: " + err.Error())
	}
	if md := m.MaskDims(); md != d {
		panic(fmt.Sprintf("tensor.Attention: block mask built for %+v, tensors are %+v", md, d))
	}
	d.OutHeadsInner = headsInner
	shape := q.Shape
	if headsInner {
		shape = []int{d.Batch, d.LenQ, d.HeadsQ, d.HeadDim}
	}
	o, l := tp.b.Attention(d, q.Store, k.Store, v.Store, m, score, scale)
	out := tp.own(FromStorage("attn", o, shape...))
	lse := tp.own(&Of[T]{Name: "attn.lse", Shape: []int{d.Batch, d.HeadsQ, d.LenQ}, Store: l}) // l may be nil (a test backend's)
	if tp.needs(q, k, v) {
		tp.Record(out, []*Of[T]{q, k, v, out, lse}, func() {
			needs := func(t *Of[T]) *Of[T] {
				if t.RequiresGrad {
					return t
				}
				return nil
			}
			g, acc := tp.gradDsts(needs(q), needs(k), needs(v))
			tp.b.AttentionBackward(d, q.Store, k.Store, v.Store, out.Store, lse.Store, out.GradStore, m, score, scale, g[0], g[1], g[2], acc)
		})
	}
	return out
}
