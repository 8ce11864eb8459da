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
// Backward recomputes each chunk's logits: with G = dloss·w_i/Σw·(softmax − onehot),
// dh_i += G_i·W and dW += Gᵀ·h.
func (tp *TapeOf[T]) LMHeadXent(h, w *Of[T], targets []int32, weights []float32, chunkRows int) *Xent[T] {
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
	res := &Xent[T]{Loss: New[T]("xent", 1), RowLoss: make([]T, n), Argmax: make([]int32, n)}
	var active []int32
	var scale []T // w_i / Σw for active rows, in order
	for i := range n {
		res.Argmax[i] = -1
		wi := float32(1)
		if weights != nil {
			wi = weights[i]
		}
		if targets[i] >= 0 && wi > 0 {
			active = append(active, int32(i))
			scale = append(scale, T(wi))
			res.WeightSum += float64(wi)
		}
	}
	if len(active) == 0 {
		return res
	}
	for i := range scale {
		scale[i] = T(float64(scale[i]) / res.WeightSum)
	}
	hc := make([]T, min(chunkRows, len(active))*hid)
	logits := make([]T, min(chunkRows, len(active))*vocab)
	tgt := make([]int32, min(chunkRows, len(active)))
	rowLoss := make([]T, len(tgt))
	amax := make([]int32, len(tgt))
	// chunk computes the logits of active[lo:hi] into logits and turns them
	// into g·scale·(softmax − onehot), recording losses and argmax.
	chunk := func(lo, hi int, g T) (rows int) {
		rows = hi - lo
		ids := active[lo:hi]
		tp.b.Gather(h.Data, hid, ids, hc[:rows*hid])
		tp.b.Gemm(false, true, rows, vocab, hid, 1, hc, hid, w.Data, hid, 0, logits, vocab)
		sc := make([]T, rows)
		for j, id := range ids {
			tgt[j] = targets[id]
			sc[j] = g * scale[lo+j]
		}
		tp.b.SoftmaxXent(logits[:rows*vocab], rows, vocab, tgt[:rows], sc, rowLoss[:rows], amax[:rows])
		return rows
	}
	var total float64
	for lo := 0; lo < len(active); lo += chunkRows {
		hi := min(lo+chunkRows, len(active))
		chunk(lo, hi, 1)
		for j, id := range active[lo:hi] {
			res.RowLoss[id] = rowLoss[j]
			res.Argmax[id] = amax[j]
			total += float64(rowLoss[j]) * float64(scale[lo+j])
		}
	}
	res.Loss.Data[0] = T(total)
	if tp.needs(h, w) {
		tp.Record(res.Loss, func() {
			g := res.Loss.Grad[0]
			var dhc []T
			if h.RequiresGrad {
				dhc = make([]T, len(hc))
				h.EnsureGrad()
			}
			for lo := 0; lo < len(active); lo += chunkRows {
				rows := chunk(lo, min(lo+chunkRows, len(active)), g)
				if h.RequiresGrad {
					tp.b.Gemm(false, false, rows, hid, vocab, 1, logits, vocab, w.Data, hid, 0, dhc, hid)
					tp.b.ScatterAdd(dhc[:rows*hid], hid, active[lo:lo+rows], h.Grad)
				}
				if w.RequiresGrad {
					tp.b.Gemm(true, false, vocab, hid, rows, 1, logits, vocab, hc, hid, 1, w.EnsureGrad(), hid)
				}
			}
		})
	}
	return res
}
