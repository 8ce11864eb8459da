package tensor

import "fmt"

// Xent is the result of LMHeadXent. The loss and the per-row results stay
// on the tape's backend; Read brings the per-row results to the host.
type Xent[T Float] struct {
	// Loss is the scalar Σ_i w_i·CE_i / Σ_i w_i over the active rows.
	Loss *Of[T]
	// Rows are the rows the cross-entropy was computed over.
	Rows *XentRows[T]
	// ActiveLoss[j] is CE of row Rows.Active[j] (a statistic).
	ActiveLoss Storage[T]
	// ActiveArgmax[j] is the predicted token of row Rows.Active[j].
	ActiveArgmax Ints
	// WeightSum is Σ_i w_i over the active rows.
	WeightSum float64
}

// Read downloads the per-row results through b: rowLoss[i] is CE_i (0 for
// inactive rows) and argmax[i] the predicted token of row i (−1 for inactive
// rows), for every row of the hidden state. On a device it waits for the
// queued work.
func (x *Xent[T]) Read(b Backend[T]) (rowLoss []T, argmax []int32) {
	n, na := x.Rows.N, len(x.Rows.Active)
	rowLoss, argmax = make([]T, n), make([]int32, n)
	for i := range argmax {
		argmax[i] = -1
	}
	if na == 0 {
		return rowLoss, argmax
	}
	al, am := make([]T, na), make([]int32, na)
	b.Download(x.ActiveLoss, al)
	b.DownloadInts(x.ActiveArgmax, am)
	for j, id := range x.Rows.Active {
		rowLoss[id], argmax[id] = al[j], am[j]
	}
	return rowLoss, argmax
}

// DefaultXentChunk is the CPU backend's XentChunk: the logit elements one
// chunk of LMHeadXent may hold when it is given no chunk size (16 MiB of
// float32: a chunk that stays in a CPU's caches).
const DefaultXentChunk = 1 << 22

// XentRows says which rows of a cross-entropy carry loss and with what
// target and weight, compacted: the preparation of LMHeadXent, done once
// when a step's inputs are assembled (and uploaded to the backend) so that
// the op itself only gathers rows and runs kernels. Row i is active when
// its target is ≥ 0 and its weight > 0.
type XentRows[T Float] struct {
	N         int       // rows of the hidden state
	Active    []int32   // the rows computed, ascending: the active ones (the candidates with NewXentRowsFixed)
	Targets   []int32   // Targets[j]: the target of row Active[j]
	Weights   []float64 // Weights[j]: the weight of row Active[j]
	WeightSum float64   // Σ of the active rows' weights, in row order

	// On the backend: Active, Targets and Scale[j] = Weights[j]/WeightSum
	// (the row's share of the loss, a statistic).
	DevActive, DevTargets Ints
	Scale                 Storage[T]
}

// NewXentRows compacts targets [N] (−1 = ignored) and weights [N] (nil:
// all 1) into the active rows and uploads them to b.
func NewXentRows[T Float](b Backend[T], targets []int32, weights []float64) *XentRows[T] {
	return newXentRows(b, targets, weights, nil)
}

// NewXentRowsFixed is NewXentRows with every candidate row kept (every row
// when candidate is nil), the ignored ones with target −1 and weight 0
// (loss 0, argmax −1, no gradient), so that the op's shapes depend on N and
// the candidates alone: a step of fixed shapes (a length bucket, replayed
// as a CUDA graph) keeps them whatever its labels. The ignored rows cost
// their part of the LM head's work; rows that are not candidates (those
// that can never carry a label, by the layout of the rows) cost nothing,
// and it panics if one does carry a label.
func NewXentRowsFixed[T Float](b Backend[T], targets []int32, weights []float64, candidate func(i int) bool) *XentRows[T] {
	if candidate == nil {
		candidate = func(int) bool { return true }
	}
	return newXentRows(b, targets, weights, candidate)
}

// newXentRows keeps the active rows and, when fixed is not nil, also the
// inactive rows it accepts.
func newXentRows[T Float](b Backend[T], targets []int32, weights []float64, fixed func(i int) bool) *XentRows[T] {
	if weights != nil {
		checkLen("XentRows weights", len(weights), len(targets))
	}
	r := &XentRows[T]{N: len(targets)}
	for i, t := range targets {
		wi := 1.0
		if weights != nil {
			wi = weights[i]
		}
		active := t >= 0 && wi > 0
		keep := active
		if fixed != nil {
			keep = fixed(i)
			if active && !keep {
				panic(fmt.Sprintf("tensor.NewXentRowsFixed: row %d has target %d and weight %g but is not a candidate row", i, t, wi))
			}
			if !active {
				t, wi = -1, 0
			}
		}
		if keep {
			r.Active = append(r.Active, int32(i))
			r.Targets = append(r.Targets, t)
			r.Weights = append(r.Weights, wi)
			r.WeightSum += wi
		}
	}
	scale := make([]T, len(r.Active))
	if r.WeightSum > 0 {
		for j, wi := range r.Weights {
			scale[j] = T(wi / r.WeightSum)
		}
	}
	r.DevActive, r.DevTargets, r.Scale = b.UploadInts(r.Active), b.UploadInts(r.Targets), b.Upload(scale, true)
	return r
}

// LMHeadXent computes the cross-entropy of logits = h·Wᵀ (h [N, H], W [V, H])
// against targets without materialising the N×V logits: it is LMHeadXentRows
// with the rows of NewXentRows(targets, weights).
func (tp *TapeOf[T]) LMHeadXent(h, w *Of[T], targets []int32, weights []float64, chunkRows int) *Xent[T] {
	return tp.LMHeadXentRows(h, w, NewXentRows(tp.b, targets, weights), chunkRows)
}

// LMHeadXentRows computes the cross-entropy of logits = h·Wᵀ (h [N, H],
// W [V, H]) over the active rows of rows without materialising the N×V
// logits: active rows are processed in chunks of chunkRows (≤ 0: as many as
// fit the backend's XentChunk elements), each chunk's rows gathered, its logits
// computed, reduced and dropped. Inactive rows cost nothing.
//
//	CE_i = logsumexp(h_i·Wᵀ) − h_i·W_{t_i},  loss = Σ w_i·CE_i / Σ w_i
//
// With G_i = w_i/Σw·(softmax(h_i·Wᵀ) − onehot(t_i)) the gradients are
// dh_i += dloss·G_i·W and dW += dloss·Gᵀ·h. When the tape records and h or W
// needs a gradient, G·W and Gᵀ·h are computed in the same pass as the loss
// (so the logits are computed once) and kept, [N, H] and [V, H], until the
// backward step scales them by dloss (a tape that releases gradients gives
// them back then, and the chunk's temporaries after the forward pass). Every step goes through the backend,
// the loss too (Σ_j Scale_j·CE_j as a product): nothing is read back.
func (tp *TapeOf[T]) LMHeadXentRows(h, w *Of[T], rows *XentRows[T], chunkRows int) *Xent[T] {
	if len(h.Shape) != 2 || len(w.Shape) != 2 || h.Shape[1] != w.Shape[1] {
		panic(fmt.Sprintf("tensor.LMHeadXent: hidden %v does not match head %v ([vocab, hidden])", h, w))
	}
	n, hid, vocab := h.Shape[0], h.Shape[1], w.Shape[0]
	checkLen("LMHeadXent rows", rows.N, n)
	if chunkRows <= 0 {
		chunkRows = max(1, tp.b.XentChunk()/vocab)
	}
	na := len(rows.Active)
	res := &Xent[T]{Loss: &Of[T]{Name: "xent", Shape: []int{1}, Store: tp.b.AllocStat(1)}, Rows: rows, WeightSum: rows.WeightSum,
		ActiveLoss: tp.b.AllocStat(na), ActiveArgmax: tp.b.AllocInts(na)}
	if na == 0 {
		return res
	}
	m := min(chunkRows, na)
	hc := tp.b.AllocOut(m * hid)
	logits := tp.b.AllocOut(m * vocab)
	// G·W of every row, of one chunk, and Gᵀ·h, kept as statistics (full
	// precision: dW sums over every chunk).
	var dh, dhc, dw Storage[T]
	if tp.needs(h, w) {
		if h.RequiresGrad {
			dh, dhc = tp.b.AllocStat(n*hid), tp.b.AllocStat(m*hid)
		}
		if w.RequiresGrad {
			dw = tp.b.AllocStat(vocab * hid)
		}
	}
	for lo := 0; lo < na; lo += chunkRows {
		hi := min(lo+chunkRows, na)
		ids, k := rows.DevActive.Slice(lo, hi), hi-lo
		tp.b.Gather(h.Store, hid, ids, hc.Slice(0, k*hid))
		tp.b.Gemm(false, true, k, vocab, hid, 1, hc, hid, w.Store, hid, 0, logits, vocab)
		tp.b.SoftmaxXent(logits.Slice(0, k*vocab), k, vocab, rows.DevTargets.Slice(lo, hi), rows.Scale.Slice(lo, hi),
			res.ActiveLoss.Slice(lo, hi), res.ActiveArgmax.Slice(lo, hi))
		if dh != nil {
			tp.b.Gemm(false, false, k, hid, vocab, 1, logits, vocab, w.Store, hid, 0, dhc, hid)
			tp.b.ScatterAdd(dhc.Slice(0, k*hid), hid, ids, dh)
		}
		if dw != nil {
			tp.b.Gemm(true, false, vocab, hid, k, 1, logits, vocab, hc, hid, 1, dw, hid)
		}
	}
	// loss = Σ_j Scale_j·CE_j, a 1×na by na×1 product.
	tp.b.Gemm(false, false, 1, 1, na, 1, rows.Scale, na, res.ActiveLoss, 1, 0, res.Loss.Store, 1)
	tp.releaseTemp(dhc)
	tp.releaseTemp(logits)
	tp.releaseTemp(hc)
	if dh != nil || dw != nil {
		tp.Record(res.Loss, nil, func() { // dh and dw are its own temporaries
			if dh != nil {
				tp.b.AxpyBy(1, res.Loss.GradStore, dh, h.EnsureGrad())
			}
			if dw != nil {
				tp.b.AxpyBy(1, res.Loss.GradStore, dw, w.EnsureGrad())
			}
			tp.releaseTemp(dw)
			tp.releaseTemp(dh)
		})
	}
	return res
}
