package tensor

import "fmt"

// Xent is the result of LMHeadXent.
type Xent[T Float] struct {
	// Loss is the scalar Σ_i w_i·CE_i / Σ_i w_i over the active rows.
	Loss *Of[T]
	// RowLoss[i] is CE_i (0 for inactive rows).
	RowLoss []T
	// Argmax[i] is the predicted token of row i (−1 for inactive rows).
	Argmax []int32
	// WeightSum is Σ_i w_i over the active rows.
	WeightSum float64
}

// DefaultXentChunk is the number of logit elements one chunk may hold when
// LMHeadXent is given chunk ≤ 0 (16 MiB of float32).
const DefaultXentChunk = 1 << 22

// LMHeadXent computes the cross-entropy of logits = h·Wᵀ (h [N, H], W [V, H])
// against targets without materialising the N×V logits: rows are processed
// in chunks of chunkRows (≤ 0: as many as fit DefaultXentChunk elements),
// each chunk's logits computed, reduced and dropped. Row i is active when
// targets[i] ≥ 0 and weights[i] > 0 (weights nil means all 1); inactive rows
// cost nothing.
//
//	CE_i = logsumexp(h_i·Wᵀ) − h_i·W_{t_i},  loss = Σ w_i·CE_i / Σ w_i
//
// With G_i = w_i/Σw·(softmax(h_i·Wᵀ) − onehot(t_i)) the gradients are
// dh_i += dloss·G_i·W and dW += dloss·Gᵀ·h. When the tape records and h or W
// needs a gradient, G·W and Gᵀ·h are computed in the same pass as the loss
// (so the logits are computed once) and kept, [N, H] and [V, H], until the
// backward step scales them by dloss.
func (tp *TapeOf[T]) LMHeadXent(h, w *Of[T], targets []int32, weights []float64, chunkRows int) *Xent[T] {
	if len(h.Shape) != 2 || len(w.Shape) != 2 || h.Shape[1] != w.Shape[1] {
		panic(fmt.Sprintf("tensor.LMHeadXent: hidden %v does not match head %v ([vocab, hidden])", h, w))
	}
	n, hid, vocab := h.Shape[0], h.Shape[1], w.Shape[0]
	checkLen("LMHeadXent targets", len(targets), n)
	if weights != nil {
		checkLen("LMHeadXent weights", len(weights), n)
	}
	if chunkRows <= 0 {
		chunkRows = max(1, DefaultXentChunk/vocab)
	}
	weight := func(i int32) float64 {
		if weights == nil {
			return 1
		}
		return weights[i]
	}
	res := &Xent[T]{Loss: New[T]("xent", 1), RowLoss: make([]T, n), Argmax: make([]int32, n)}
	var active []int32
	for i := range n {
		res.Argmax[i] = -1
		if wi := weight(int32(i)); targets[i] >= 0 && wi > 0 {
			active = append(active, int32(i))
			res.WeightSum += wi
		}
	}
	if len(active) == 0 {
		return res
	}
	rows := min(chunkRows, len(active))
	hc := make([]T, rows*hid)
	logits := make([]T, rows*vocab)
	tgt := make([]int32, rows)
	scale := make([]T, rows)
	rowLoss := make([]T, rows)
	amax := make([]int32, rows)
	var dh, dhc, dw []T // G·W of every row, of one chunk, and Gᵀ·h
	if tp.needs(h, w) {
		if h.RequiresGrad {
			dh, dhc = make([]T, n*hid), make([]T, rows*hid)
		}
		if w.RequiresGrad {
			dw = make([]T, vocab*hid)
		}
	}
	var total float64
	for lo := 0; lo < len(active); lo += chunkRows {
		ids := active[lo:min(lo+chunkRows, len(active))]
		m := len(ids)
		tp.b.Gather(h.Data, hid, ids, hc[:m*hid])
		tp.b.Gemm(false, true, m, vocab, hid, 1, hc, hid, w.Data, hid, 0, logits, vocab)
		for j, id := range ids {
			tgt[j] = targets[id]
			scale[j] = T(weight(id) / res.WeightSum)
		}
		tp.b.SoftmaxXent(logits[:m*vocab], m, vocab, tgt[:m], scale[:m], rowLoss[:m], amax[:m])
		for j, id := range ids {
			res.RowLoss[id] = rowLoss[j]
			res.Argmax[id] = amax[j]
			total += weight(id) * float64(rowLoss[j])
		}
		if dh != nil {
			tp.b.Gemm(false, false, m, hid, vocab, 1, logits, vocab, w.Data, hid, 0, dhc, hid)
			tp.b.ScatterAdd(dhc[:m*hid], hid, ids, dh)
		}
		if dw != nil {
			tp.b.Gemm(true, false, vocab, hid, m, 1, logits, vocab, hc, hid, 1, dw, hid)
		}
	}
	res.Loss.Data[0] = T(total / res.WeightSum)
	if dh != nil || dw != nil {
		tp.Record(res.Loss, func() {
			g := res.Loss.Grad[0]
			if dh != nil {
				tp.b.Axpy(g, dh, h.EnsureGrad())
			}
			if dw != nil {
				tp.b.Axpy(g, dw, w.EnsureGrad())
			}
		})
	}
	return res
}
