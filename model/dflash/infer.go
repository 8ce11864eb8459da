package dflash

import (
	"fmt"
	"math"

	"dflash/tensor"
)

// Context is the drafter's inference state for one sequence
// (docs/DRAFTER.md §7), on a backend: for every drafter layer, the keys
// and values of the context features of positions 0..Len−1 in a
// tensor.KVCache allocated once for Max positions and a block after them
// (Propose writes the block's keys and values there without counting
// them). Context rows never change once added (a position enters only
// after the target accepted it), so the context only grows. Free gives its
// memory back.
type Context[T tensor.Float] struct {
	kv  *tensor.KVCache[T]
	Len int
	Max int
}

// NewContext returns an empty inference context for d on b holding up to
// maxLen positions.
func (d *Drafter[T]) NewContext(b tensor.Backend[T], maxLen int) *Context[T] {
	c := d.Cfg
	return &Context[T]{kv: tensor.NewKVCache(b, len(d.Layers), c.NumKVHeads, maxLen+c.BlockSize, c.HeadDim), Max: maxLen}
}

// Free gives the context's memory back; ctx must not be used afterwards.
func (ctx *Context[T]) Free() { ctx.kv.Free() }

// Extend appends positions ctx.Len.. to ctx from the target's hidden
// states at the taps: hidden holds one [n, H] tensor on b per tap, in tap
// order (the outputs of the tapped target layers for the n new
// positions). It computes u = RMSNorm(fc(concat taps)) for the new rows
// and every layer's context keys and values (§2.1, §2.3).
func (d *Drafter[T]) Extend(b tensor.Backend[T], ctx *Context[T], hidden []*tensor.Of[T]) {
	c := d.Cfg
	H, k := c.HiddenSize, len(c.TargetLayerIDs)
	if len(hidden) != k {
		panic(fmt.Sprintf("dflash: Extend: %d hidden-state taps, the drafter reads %d", len(hidden), k))
	}
	n := hidden[0].Numel() / H
	for t, h := range hidden {
		if h.Numel() != n*H || h.Cols() != H {
			panic(fmt.Sprintf("dflash: Extend: tap %d is %v, want [%d, %d]", t, h, n, H))
		}
	}
	if n == 0 {
		return
	}
	if ctx.Len+n > ctx.Max {
		panic(fmt.Sprintf("dflash: Extend: %d positions after %d overflow a context of %d", n, ctx.Len, ctx.Max))
	}
	tp := tensor.NewInference(b)
	rows := make([]*tensor.Of[T], k)
	for t, h := range hidden {
		rows[t] = tp.Reshape(h, n, H)
	}
	cat := rows[0]
	if k > 1 {
		cat = tp.Concat(1, rows...) // [n, k·H]: row r holds every tap's row r, in tap order
	}
	u := tp.RMSNorm(tp.Linear(cat, d.FC, nil), d.HiddenNorm, c.RMSNormEps)
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(ctx.Len + i)
	}
	table := tensor.Table(b, d.rope(), pos)
	at := tensor.CacheAts(b, []int{ctx.Len}, n)[0]
	for l := range d.Layers {
		kc, vc := d.contextKV(tp, l, u, 1, n, table)
		tp.CachePut(ctx.kv, l, kc, true, tp.ConcatCols(1, vc), true, at)
	}
	ctx.Len += n
}

// Propose runs one draft block (§7): ids [last, M × (B−1)] at positions
// ctx.Len .. ctx.Len+B−1, attending to every context position and to the
// whole block, and returns the logits of all B slots [B, V] (slot s ≥ 1
// predicts the token at position ctx.Len+s; slot 0 is not a prediction).
// It is the training forward pass of §2 for a single block anchored at
// ctx.Len with the context cached, and ProposeRows of one context.
func (d *Drafter[T]) Propose(b tensor.Backend[T], head Head[T], ctx *Context[T], last int32) *tensor.Of[T] {
	return d.ProposeRows(b, head, []*Context[T]{ctx}, []int32{last})
}

// ProposeRows is Propose of R = len(ctxs) sequences in one pass: block r
// is [last[r], M × (B−1)] after ctxs[r] (the contexts may differ in
// length). The embedding, projections, MLPs, norms and LM head run once
// over the R·B block rows; each block attends to its own context alone.
// It returns the logits [R·B, V], block r in rows r·B..r·B+B−1.
func (d *Drafter[T]) ProposeRows(b tensor.Backend[T], head Head[T], ctxs []*Context[T], last []int32) *tensor.Of[T] {
	c := d.Cfg
	B, R := c.BlockSize, len(ctxs)
	if R == 0 || len(last) != R {
		panic(fmt.Sprintf("dflash: ProposeRows: %d contexts, %d last tokens", R, len(last)))
	}
	ids := make([]int32, 0, R*B)
	pos := make([]int32, 0, R*B)
	kvs := make([]*tensor.KVCache[T], R)
	past := make([]int, R)
	for r, ctx := range ctxs {
		S := ctx.Len
		for s := range B {
			ids, pos = append(ids, int32(c.MaskTokenID)), append(pos, int32(S+s))
		}
		ids[r*B] = last[r]
		kvs[r], past[r] = ctx.kv, S
	}
	// The inputs go to b before the pass, which replays as one recorded
	// region at any position (model.ReplayTokens, Backend.Replay).
	table := tensor.Table(b, d.rope(), pos)
	idsOn := b.UploadInts(ids)
	ats := tensor.CacheAts(b, past, B)
	tp := tensor.NewInference(b)
	scale := 1 / math.Sqrt(float64(c.HeadDim))
	var logits *tensor.Of[T]
	b.Replay(proposeKey[T]{d: d, head: head, rows: R, span: ats[0].Span}, func() {
		z := tp.Embedding(head.Embed, idsOn)
		for l := range d.Layers {
			q, kb, vb := d.blockQKV(tp, l, z, R, table) // q [R, nh, B, D], kb [R·B, nkv·D]
			// The block's keys and values go after the context, uncounted
			// (the next Extend overwrites them). One block anchored at the
			// end of the context sees every key (the DFlash mask: the
			// context before the anchor and its own block), so attention
			// needs no mask.
			tp.CachePutRows(kvs, l, kb, true, tp.ConcatCols(R, vb), true, ats)
			a := tp.CacheAttendRows(kvs, l, q, ats, false, scale)
			z = d.layerOut(tp, l, z, tp.Transpose12(a), R*B) // the layer takes it heads inner
		}
		logits = tp.Linear(tp.RMSNorm(z, d.Norm, c.RMSNormEps), head.LMHead, nil)
	})
	return logits
}

// proposeKey is the region of a ProposeRows pass: its drafter and head,
// rows and cache span.
type proposeKey[T tensor.Float] struct {
	d          *Drafter[T]
	head       Head[T]
	rows, span int
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
