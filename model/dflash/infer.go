package dflash

import (
	"fmt"
	"math"

	"dflash/model"
	"dflash/tensor"
)

// Context is the drafter's inference state for one sequence
// (docs/DRAFTER.md §7): for every drafter layer, the keys and values of the
// context features of positions 0..Len−1. Context rows never change once
// added (a position enters only after the target accepted it), so the cache
// only grows.
type Context[T tensor.Float] struct {
	k, v [][]T // [layer] → Len·n_kv·D, rows in position order
	Len  int
}

// NewContext returns an empty inference context for d.
func (d *Drafter[T]) NewContext() *Context[T] {
	n := len(d.Layers)
	return &Context[T]{k: make([][]T, n), v: make([][]T, n)}
}

// Extend appends positions ctx.Len.. to ctx from the target's hidden
// states at the taps: hidden holds one [n, H] row-major slice per tap, in
// tap order (the outputs of the tapped target layers for the n new
// positions). It computes u = RMSNorm(fc(concat taps)) for the new rows
// and every layer's context keys and values (§2.1, §2.3).
func (d *Drafter[T]) Extend(b tensor.Backend[T], ctx *Context[T], hidden [][]float32) {
	c := d.Cfg
	H, k := c.HiddenSize, len(c.TargetLayerIDs)
	if len(hidden) != k {
		panic(fmt.Sprintf("dflash: Extend: %d hidden-state taps, the drafter reads %d", len(hidden), k))
	}
	n := len(hidden[0]) / H
	for t, h := range hidden {
		if len(h) != n*H {
			panic(fmt.Sprintf("dflash: Extend: tap %d has %d values, want %d", t, len(h), n*H))
		}
	}
	if n == 0 {
		return
	}
	cat := tensor.New[T]("context", n, k*H)
	for t, h := range hidden {
		for r := range n {
			dst := cat.Data()[r*k*H+t*H : r*k*H+(t+1)*H]
			for i, v := range h[r*H : (r+1)*H] {
				dst[i] = T(v)
			}
		}
	}
	tp := tensor.NewInference(b)
	u := tp.RMSNorm(tp.Linear(cat, d.FC, nil), d.HiddenNorm, c.RMSNormEps)
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(ctx.Len + i)
	}
	table := tensor.Table(b, d.rope(), pos)
	for l := range d.Layers {
		kc, vc := d.contextKV(tp, l, u, 1, n, table)
		ctx.k[l] = append(ctx.k[l], kc.Data()...)
		ctx.v[l] = append(ctx.v[l], vc.Data()...)
	}
	ctx.Len += n
}

// Propose runs one draft block (§7): ids [last, M × (B−1)] at positions
// ctx.Len .. ctx.Len+B−1, attending to every context position and to the
// whole block, and returns the logits of all B slots [B, V] (slot s ≥ 1
// predicts the token at position ctx.Len+s; slot 0 is not a prediction).
// It is the training forward pass of §2 for a single block anchored at
// ctx.Len with the context cached.
func (d *Drafter[T]) Propose(b tensor.Backend[T], head Head[T], ctx *Context[T], last int32) *tensor.Of[T] {
	c := d.Cfg
	B, S, KV := c.BlockSize, ctx.Len, c.NumKVHeads*c.HeadDim
	ids := make([]int32, B)
	pos := make([]int32, B)
	for s := range ids {
		ids[s], pos[s] = int32(c.MaskTokenID), int32(S+s)
	}
	ids[0] = last
	tp := tensor.NewInference(b)
	table := tensor.Table(b, d.rope(), pos)
	// One block anchored at the end of the context sees every key (the
	// DFlash mask: the context before the anchor and its own block), so
	// attention needs no mask.
	att := func(q, k, v *tensor.Of[T]) *tensor.Of[T] {
		n := S + B
		ks, vs := make([][]T, c.NumKVHeads), make([][]T, c.NumKVHeads)
		for g := range ks {
			ks[g], vs[g] = k.Data()[g*n*c.HeadDim:(g+1)*n*c.HeadDim], v.Data()[g*n*c.HeadDim:(g+1)*n*c.HeadDim]
		}
		out := tensor.New[T]("attn", q.Shape...)
		model.AttendRows(b, q.Data(), ks, vs, c.NumHeads, B, c.HeadDim, func(int) int { return n }, 1/math.Sqrt(float64(c.HeadDim)), out.Data())
		return tp.Transpose12(out) // the layer takes it heads inner
	}
	z := tp.Embedding(head.Embed, b.UploadInts(ids))
	for l := range d.Layers {
		kc := tensor.FromData(fmt.Sprintf("ctx_k%d", l), ctx.k[l], 1, S, KV)
		vc := tensor.ColsOf(tensor.FromData(fmt.Sprintf("ctx_v%d", l), ctx.v[l], S, KV))
		z = d.layer(tp, l, z, kc, vc, 1, B, table, att)
	}
	return tp.Linear(tp.RMSNorm(z, d.Norm, c.RMSNormEps), head.LMHead, nil)
}

// rope returns the drafter's rotary frequencies, made on first use and
// kept with the table of angles they build (tensor.Angles); the config was
// validated when the drafter was made, so an error here is a programmer
// error. A drafter is used from one goroutine at a time.
func (d *Drafter[T]) rope() *tensor.Rope {
	if d.rp == nil {
		r, err := d.Cfg.Rope()
		if err != nil {
			panic("dflash: rope: " + err.Error())
		}
		d.rp = r
	}
	return d.rp
}
