package dflash

import (
	"slices"

	"dflash/model"
)

// FLOPs is the work of one training step in floating-point operations (a
// multiply-add is 2), counted as docs/PERF.md ("Drafter training step")
// writes it out:
//
//   - target forward, layers 0..deepest tap only: 2·(GEMM weights of a
//     layer)·tokens per layer, plus causal attention, 4·D per (query head,
//     allowed pair) (q·k and p·v);
//   - drafter forward: fc over the context tokens, per layer the k and v
//     projections of the context and every projection of the block rows
//     (dead blocks included: they are computed), DFlash attention at 4·D per
//     (query head, allowed pair) of the mask, and the LM head over the block
//     slots that carry a label (the cross-entropy skips the others) and the
//     weighted sum of their losses (a product of length labels);
//   - drafter backward: twice the forward for every GEMM and the attention,
//     except fc (its input, the target's hidden states, needs no gradient:
//     dW only) and the LM head (frozen: dX only), once each.
//
// Element-wise work (norms, RoPE, SwiGLU, softmax) is not counted.
type FLOPs struct {
	TargetForward   float64 `json:"target_forward"`
	DrafterForward  float64 `json:"drafter_forward"`
	DrafterBackward float64 `json:"drafter_backward"`
}

// Total returns the step's FLOPs.
func (f FLOPs) Total() float64 { return f.TargetForward + f.DrafterForward + f.DrafterBackward }

// StepFLOPs counts the FLOPs of one step of drafter dc over target tc for
// batch b (its rows of b.Len tokens; packed, its samples' documents decide
// the target's attention pairs) with the blocks bl (their anchors, context
// starts, valid counts and labels decide the drafter's attention pairs and
// the LM-head rows).
func StepFLOPs(tc *model.Config, dc *Config, b *Batch, bl *Blocks) FLOPs {
	H, I, D := float64(tc.HiddenSize), float64(tc.IntermediateSize), float64(tc.HeadDim)
	q, kv := float64(tc.NumHeads)*D, float64(tc.NumKVHeads)*D
	seqLen := b.Len
	T := float64(b.Rows * seqLen)
	depth := float64(slices.Max(dc.TargetLayerIDs) + 1)
	layerW := 2*q*H + 2*kv*H + 3*H*I // q and o, k and v, gate up down
	causalPairs := targetPairs(b)

	var f FLOPs
	f.TargetForward = depth * (2*layerW*T + 4*D*float64(tc.NumHeads)*causalPairs)

	fc := 2 * T * float64(len(dc.TargetLayerIDs)) * H * H
	ctxKV := 2 * T * 2 * kv * H
	blockRows := float64(bl.Rows * bl.N * bl.B)
	block := 2 * blockRows * layerW
	attn := 4 * D * float64(tc.NumHeads) * maskPairs(bl, seqLen)
	labels := float64(labelRows(bl))
	head := 2 * labels * H * float64(tc.VocabSize)
	layers := float64(dc.NumLayers) * (ctxKV + block + attn)
	f.DrafterForward = fc + layers + head + 2*labels
	f.DrafterBackward = fc + 2*layers + head
	return f
}

// targetPairs returns the (query, key) pairs the target's attention allows
// over b, per head: causal over each whole row (its padding too, which the
// pass computes), or packed, causal within each sample and within the
// padding after a row's last one.
func targetPairs(b *Batch) float64 {
	tri := func(n int) float64 { return float64(n) * float64(n+1) / 2 }
	if !b.Packed {
		return float64(b.Rows) * tri(b.Len)
	}
	var pairs float64
	for r := range b.Rows {
		for _, sg := range b.RowSegs(r) {
			pairs += tri(sg.Len)
		}
		pairs += tri(b.Len - b.SeqLen[r])
	}
	return pairs
}

// maskPairs returns the allowed (query, key) pairs of the DFlash mask of
// bl over a context of seqLen tokens, per head: each slot of a live block
// with anchor a, in a sample starting at s, sees the a−s context positions
// of its sample before it (a < seqLen) and the B slots of its own block;
// dead blocks see nothing.
func maskPairs(bl *Blocks, seqLen int) float64 {
	var pairs float64
	for r := range bl.Rows {
		for j := range int(bl.NumValid[r]) {
			a := min(int(bl.Anchors[r*bl.N+j]), seqLen)
			if bl.Starts != nil {
				a -= int(bl.Starts[r*bl.N+j])
			}
			pairs += float64(bl.B) * float64(a+bl.B)
		}
	}
	return pairs
}

// labelRows returns the number of block slots that carry a label with a
// positive weight: the rows the LM head and cross-entropy compute.
func labelRows(bl *Blocks) int {
	n := 0
	for i, l := range bl.Labels {
		if l >= 0 && bl.Weights[i] > 0 {
			n++
		}
	}
	return n
}
