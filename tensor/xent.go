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

// XentRows says which rows of a cross-entropy carry loss and with what
// target and weight, compacted: the host-side preparation of LMHeadXent,
// done once when a step's inputs are assembled so that the op itself only
// gathers rows and runs kernels through the backend. Row i is active when
// its target is ≥ 0 and its weight > 0.
type XentRows[T Float] struct {
	N         int       // rows of the hidden state
	Active    []int32   // active rows, ascending
	Targets   []int32   // Targets[j]: the target of row Active[j]
	Weights   []float64 // Weights[j]: the weight of row Active[j]
	Scale     []T       // Scale[j] = Weights[j] / WeightSum, the row's share of the loss
	WeightSum float64   // Σ of the active rows' weights, in row order
}

// NewXentRows compacts targets [N] (−1 = ignored) and weights [N] (nil:
// all 1) into the active rows.
func NewXentRows[T Float](targets []int32, weights []float64) *XentRows[T] {
	if weights != nil {
		checkLen("XentRows weights", len(weights), len(targets))
	}
	r := &XentRows[T]{N: len(targets)}
	for i, t := range targets {
		wi := 1.0
		if weights != nil {
			wi = weights[i]
		}
		if t >= 0 && wi > 0 {
			r.Active = append(r.Active, int32(i))
			r.Targets = append(r.Targets, t)
			r.Weights = append(r.Weights, wi)
			r.WeightSum += wi
		}
	}
	r.Scale = make([]T, len(r.Active))
	for j, wi := range r.Weights {
		r.Scale[j] = T(wi / r.WeightSum)
	}
	return r
}

// LMHeadXent computes the cross-entropy of logits = h·Wᵀ (h [N, H], W [V, H])
// against targets without materialising the N×V logits: it is LMHeadXentRows
// with the rows of NewXentRows(targets, weights).
func (tp *TapeOf[T]) LMHeadXent(h, w *Of[T], targets []int32, weights []float64, chunkRows int) *Xent[T] {
	return tp.LMHeadXentRows(h, w, NewXentRows[T](targets, weights), chunkRows)
}

// LMHeadXentRows computes the cross-entropy of logits = h·Wᵀ (h [N, H],
// W [V, H]) over the active rows of rows without materialising the N×V
// logits: active rows are processed in chunks of chunkRows (≤ 0: as many as
// fit DefaultXentChunk elements), each chunk's rows gathered, its logits
// computed, reduced and dropped. Inactive rows cost nothing.
//
//	CE_i = logsumexp(h_i·Wᵀ) − h_i·W_{t_i},  loss = Σ w_i·CE_i / Σ w_i
//
// With G_i = w_i/Σw·(softmax(h_i·Wᵀ) − onehot(t_i)) the gradients are
// dh_i += dloss·G_i·W and dW += dloss·Gᵀ·h. When the tape records and h or W
// needs a gradient, G·W and Gᵀ·h are computed in the same pass as the loss
// (so the logits are computed once) and kept, [N, H] and [V, H], until the
// backward step scales them by dloss. Every step on h, W and the logits
// goes through the backend; the per-row losses are read back once, after
// the last chunk, to form the loss (summed in float64) and RowLoss/Argmax.
func (tp *TapeOf[T]) LMHeadXentRows(h, w *Of[T], rows *XentRows[T], chunkRows int) *Xent[T] {
	if len(h.Shape) != 2 || len(w.Shape) != 2 || h.Shape[1] != w.Shape[1] {
		panic(fmt.Sprintf("tensor.LMHeadXent: hidden %v does not match head %v ([vocab, hidden])", h, w))
	}
	n, hid, vocab := h.Shape[0], h.Shape[1], w.Shape[0]
	checkLen("LMHeadXent rows", rows.N, n)
	if chunkRows <= 0 {
		chunkRows = max(1, DefaultXentChunk/vocab)
	}
	res := &Xent[T]{Loss: New[T]("xent", 1), RowLoss: make([]T, n), Argmax: make([]int32, n), WeightSum: rows.WeightSum}
	for i := range res.Argmax {
		res.Argmax[i] = -1
	}
	na := len(rows.Active)
	if na == 0 {
		return res
	}
	m := min(chunkRows, na)
	hc := make([]T, m*hid)
	logits := make([]T, m*vocab)
	rowLoss := make([]T, na)
	amax := make([]int32, na)
	var dh, dhc, dw []T // G·W of every row, of one chunk, and Gᵀ·h
	if tp.needs(h, w) {
		if h.RequiresGrad {
			dh, dhc = make([]T, n*hid), make([]T, m*hid)
		}
		if w.RequiresGrad {
			dw = make([]T, vocab*hid)
		}
	}
	for lo := 0; lo < na; lo += chunkRows {
		hi := min(lo+chunkRows, na)
		ids, k := rows.Active[lo:hi], hi-lo
		tp.b.Gather(h.Data, hid, ids, hc[:k*hid])
		tp.b.Gemm(false, true, k, vocab, hid, 1, hc, hid, w.Data, hid, 0, logits, vocab)
		tp.b.SoftmaxXent(logits[:k*vocab], k, vocab, rows.Targets[lo:hi], rows.Scale[lo:hi], rowLoss[lo:hi], amax[lo:hi])
		if dh != nil {
			tp.b.Gemm(false, false, k, hid, vocab, 1, logits, vocab, w.Data, hid, 0, dhc, hid)
			tp.b.ScatterAdd(dhc[:k*hid], hid, ids, dh)
		}
		if dw != nil {
			tp.b.Gemm(true, false, vocab, hid, k, 1, logits, vocab, hc, hid, 1, dw, hid)
		}
	}
	var total float64
	for j, id := range rows.Active {
		res.RowLoss[id], res.Argmax[id] = rowLoss[j], amax[j]
		total += rows.Weights[j] * float64(rowLoss[j])
	}
	res.Loss.Data[0] = T(total / rows.WeightSum)
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
