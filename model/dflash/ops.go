package dflash

import (
	"fmt"

	"dflash/flex"
	"dflash/tensor"
)

// ropeOp rotates x [rows, heads, D] by per-row angles (cos, sin [rows, D/2]):
// y = RoPE(x); rec says whether to record the backward step. Gradient: dx += RoPE⁻¹(dy) (rotation by the negative angle).
func ropeOp[T tensor.Float](tp *tensor.TapeOf[T], rec bool, x *tensor.Of[T], cos, sin []T) *tensor.Of[T] {
	if len(x.Shape) != 3 {
		panic(fmt.Sprintf("dflash: rope input %v is not [rows, heads, headDim]", x))
	}
	heads, d := x.Shape[1], x.Shape[2]
	y := tensor.New[T](x.Name+".rope", x.Shape...)
	b := tp.Backend()
	b.RoPE(x.Data, heads, d, cos, sin, y.Data, false)
	if rec && x.RequiresGrad {
		tp.Record(y, func() { b.RoPE(y.Grad, heads, d, cos, sin, x.EnsureGrad(), true) })
	}
	return y
}

// attentionFunc computes masked attention for q [B, Hq, Lq, D], k and v
// [B, Hkv, Lkv, D]; it returns out like q and the per-row log-sum-exp, and a
// backward function giving dq, dk, dv for dout.
type attentionFunc[T tensor.Float] func(d flex.Dims, q, k, v []T, bm *flex.BlockMask, scale float64) (out []T, back func(dout []T) (dq, dk, dv []T))

// flexAttention runs package flex's block-sparse CPU attention.
func flexAttention[T tensor.Float](d flex.Dims, q, k, v []T, bm *flex.BlockMask, scale float64) ([]T, func([]T) ([]T, []T, []T)) {
	switch qq := any(q).(type) {
	case []float32:
		kk, vv := any(k).([]float32), any(v).([]float32)
		out, lse := flex.Forward(d, qq, kk, vv, bm, nil, bm.Args(), scale)
		return any(out).([]T), func(dout []T) ([]T, []T, []T) {
			g := flex.Backward(d, qq, kk, vv, out, lse, any(dout).([]float32), bm, nil, bm.Args(), scale)
			return any(g.DQ).([]T), any(g.DK).([]T), any(g.DV).([]T)
		}
	case []float64:
		kk, vv := any(k).([]float64), any(v).([]float64)
		out, lse := flex.Forward(d, qq, kk, vv, bm, nil, bm.Args(), scale)
		return any(out).([]T), func(dout []T) ([]T, []T, []T) {
			g := flex.Backward(d, qq, kk, vv, out, lse, any(dout).([]float64), bm, nil, bm.Args(), scale)
			return any(g.DQ).([]T), any(g.DK).([]T), any(g.DV).([]T)
		}
	}
	panic(fmt.Sprintf("dflash: attention on %T", q))
}

// attentionOp applies attn to tape tensors q [B, Hq, Lq, D], k, v
// [B, Hkv, Lkv, D] and records its backward step.
func attentionOp[T tensor.Float](tp *tensor.TapeOf[T], rec bool, attn attentionFunc[T], d flex.Dims, q, k, v *tensor.Of[T], bm *flex.BlockMask, scale float64) *tensor.Of[T] {
	out, back := attn(d, q.Data, k.Data, v.Data, bm, scale)
	y := tensor.FromData[T]("attn", out, q.Shape...)
	if rec && (q.RequiresGrad || k.RequiresGrad || v.RequiresGrad) {
		tp.Record(y, func() {
			dq, dk, dv := back(y.Grad)
			b := tp.Backend()
			for _, p := range []struct {
				t *tensor.Of[T]
				g []T
			}{{q, dq}, {k, dk}, {v, dv}} {
				if p.t.RequiresGrad {
					b.Axpy(1, p.g, p.t.EnsureGrad())
				}
			}
		})
	}
	return y
}

// headLoss is the fused, chunked LM-head cross-entropy of docs/DRAFTER.md
// §4.4: for the rows of o [rows, H] with a label (labels[r] >= 0) it computes
// logits = o[r]·W_lmᵀ a chunk of rows at a time, CE_r = logsumexp − logit of
// the label, the greedy prediction, and
//
//	loss = Σ_r weights[r]·CE_r / Σ_r weights[r].
//
// The gradient with respect to o (W_lm is frozen) is
// do[r] = weights[r]/Σw · (softmax(logits[r]) − onehot(label))·W_lm, computed
// in the same pass so that no logits are kept. pred and ce come back for
// every row (pred −1 and ce 0 where there is no label).
func headLoss[T tensor.Float](tp *tensor.TapeOf[T], rec bool, o, lm *tensor.Of[T], labels []int32, weights []float64, chunk int) (loss *tensor.Of[T], pred []int32, ce []float64) {
	rows, h := o.Rows(), o.Cols()
	v := lm.Shape[0]
	if lm.Shape[1] != h || len(labels) != rows || len(weights) != rows {
		panic(fmt.Sprintf("dflash: headLoss: o %v, lm head %v, %d labels, %d weights", o, lm, len(labels), len(weights)))
	}
	if chunk <= 0 {
		chunk = 256
	}
	var live []int
	var wsum float64
	for r, l := range labels {
		if l >= 0 {
			live = append(live, r)
			wsum += weights[r]
		}
	}
	pred = make([]int32, rows)
	ce = make([]float64, rows)
	for i := range pred {
		pred[i] = -1
	}
	loss = tensor.New[T]("loss", 1)
	grad := rec && o.RequiresGrad && wsum > 0
	var do []T
	if grad {
		do = make([]T, rows*h)
	}
	b := tp.Backend()
	buf := make([]T, chunk*h)
	logits := make([]T, chunk*v)
	tg := make([]int32, chunk)
	scale := make([]T, chunk)
	lrow := make([]T, chunk)
	am := make([]int32, chunk)
	dbuf := make([]T, chunk*h)
	var total float64
	for c0 := 0; c0 < len(live); c0 += chunk {
		n := min(chunk, len(live)-c0)
		for i := 0; i < n; i++ {
			r := live[c0+i]
			copy(buf[i*h:(i+1)*h], o.Data[r*h:(r+1)*h])
			tg[i] = labels[r]
			if wsum > 0 {
				scale[i] = T(weights[r] / wsum)
			}
		}
		b.Gemm(false, true, n, v, h, 1, buf[:n*h], h, lm.Data, h, 0, logits[:n*v], v)
		b.SoftmaxXent(logits[:n*v], n, v, tg[:n], scale[:n], lrow[:n], am[:n])
		for i := 0; i < n; i++ {
			r := live[c0+i]
			pred[r] = am[i]
			ce[r] = float64(lrow[i])
			total += weights[r] * float64(lrow[i])
		}
		if grad {
			b.Gemm(false, false, n, h, v, 1, logits[:n*v], v, lm.Data, h, 0, dbuf[:n*h], h)
			for i := 0; i < n; i++ {
				r := live[c0+i]
				copy(do[r*h:(r+1)*h], dbuf[i*h:(i+1)*h])
			}
		}
	}
	if wsum > 0 {
		loss.Data[0] = T(total / wsum)
	}
	if grad {
		tp.Record(loss, func() {
			b.Axpy(loss.Grad[0], do, o.EnsureGrad())
		})
	}
	return loss, pred, ce
}
