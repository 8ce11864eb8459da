package dflash

import (
	"fmt"

	"dflash/flex"
	"dflash/tensor"
)

// StepInputs is everything a drafter forward pass reads besides the
// parameters and the head, assembled in one place before the step
// (docs/DRAFTER.md §9): on a device backend, what is uploaded once. The
// forward pass itself does no host-side assembly.
type StepInputs[T tensor.Float] struct {
	// Batch holds the token ids, loss mask and lengths; Blocks the anchors,
	// block ids, positions, labels and loss weights laid out from them.
	Batch  *Batch
	Blocks *Blocks
	// IDs are the block token ids (Blocks.IDs) on the backend.
	IDs tensor.Ints
	// Taps are the target's hidden states at the taps, [Rows*Len, H] each,
	// in tap order (the forward pass concatenates them with an op).
	Taps []*tensor.Of[T]
	// QRope rotates the block slots (positions Blocks.Pos); CtxRope the
	// context rows (positions 0..Len−1 of every row).
	QRope, CtxRope *tensor.RopeTable[T]
	// Mask is the DFlash block mask over [context ; block] keys (§3).
	Mask tensor.Mask
	// Loss holds the labelled slots, compacted, with their labels and their
	// shares of the loss, for the chunked cross-entropy (§4.4).
	Loss *tensor.XentRows[T]
}

// Inputs assembles the inputs of a forward pass over batch b with blocks
// bl on backend be (the one place they are uploaded). It panics when b and bl disagree with each other or with the
// drafter's shape (a programmer error) and returns an error when the rotary
// config or the block mask cannot be built.
func (d *Drafter[T]) Inputs(be tensor.Backend[T], b *Batch, bl *Blocks) (*StepInputs[T], error) {
	c := d.Cfg
	b.Check(c.HiddenSize, len(c.TargetLayerIDs))
	if bl.Rows != b.Rows || bl.B != c.BlockSize {
		panic(fmt.Sprintf("dflash: Inputs: blocks %dx%dx%d for a batch of %d rows, block size %d", bl.Rows, bl.N, bl.B, b.Rows, c.BlockSize))
	}
	R, S := b.Rows, b.Len
	var loss *tensor.XentRows[T]
	if bl.Fixed {
		// Every slot but a block's first (its anchor, given, never a label).
		loss = tensor.NewXentRowsFixed(be, bl.Labels, bl.Weights, func(i int) bool { return i%bl.B != 0 })
	} else {
		loss = tensor.NewXentRows(be, bl.Labels, bl.Weights)
	}
	in := &StepInputs[T]{Batch: b, Blocks: bl, IDs: be.UploadInts(bl.IDs), Loss: loss}
	in.Taps = tapTensors(be, b.Taps)
	rope := d.rope()
	in.QRope = tensor.Table(be, rope, bl.Pos)
	ctxPos := make([]int32, 0, R*S)
	for range R {
		for i := range S {
			ctxPos = append(ctxPos, int32(i))
		}
	}
	in.CtxRope = tensor.Table(be, rope, ctxPos)
	dims := flex.DFlashDims(R, c.NumHeads, c.NumKVHeads, bl.N, bl.B, S, c.HeadDim)
	var err error
	in.Mask, err = be.NewMask(flex.DFlashMask(bl.B), flex.DFlashArgs(S, bl.Anchors, nil, bl.N, bl.NumValid), dims)
	if err != nil {
		return nil, fmt.Errorf("dflash: block mask: %w", err)
	}
	return in, nil
}

// StepAttentions returns the attention calls of a training step of the
// drafter (a forward pass with train, then its backward), for
// tensor.Backend.Prepare: the DFlash block mask of the config's block size
// (the one Inputs builds) over its head dimension and GQA group, forward
// and backward. An evaluation's forward makes the same call without the
// backward.
func (d *Drafter[T]) StepAttentions() []tensor.AttentionUse {
	c := d.Cfg
	return []tensor.AttentionUse{{Mask: flex.DFlashMask(c.BlockSize), HeadDim: c.HeadDim, Group: c.NumHeads / c.NumKVHeads, Backward: true}}
}

// tapTensors returns the taps as tensors of T on be: the batch's own when T
// is float32 (they are on be already), converted and uploaded otherwise
// (the float64 reference drafter of the tests, from host taps).
func tapTensors[T tensor.Float](be tensor.Backend[T], taps []*tensor.Tensor) []*tensor.Of[T] {
	out := make([]*tensor.Of[T], len(taps))
	for t, x := range taps {
		if same, ok := any(x).(*tensor.Of[T]); ok {
			out[t] = same
			continue
		}
		v := make([]T, x.Numel())
		for i, f := range x.Data() {
			v[i] = T(f)
		}
		out[t] = tensor.FromStorage(x.Name, be.Upload(v, false), x.Shape...)
	}
	return out
}

// UploadTaps uploads hidden states of the taps (one [rows*h] slice each,
// in tap order) to be as the [rows, h] tensors of Batch.Taps.
func UploadTaps(be tensor.Backend[float32], hidden [][]float32, rows, h int) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(hidden))
	for t, x := range hidden {
		out[t] = tensor.FromStorage(fmt.Sprintf("tap%d", t), be.Upload(x, false), rows, h)
	}
	return out
}
