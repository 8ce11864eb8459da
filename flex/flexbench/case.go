package flexbench

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"dflash/flex"
)

// attnCase is the attention problem a set of options describes.
type attnCase struct {
	dims    flex.Dims
	mask    *flex.MaskProgram
	args    *flex.Args
	pairs   float64 // allowed (q, kv) pairs summed over the batch, per head
	dflash  bool
	anchors []int32 // dflash: [batch, anchors]
	starts  []int32 // dflash: [batch, anchors], each block's flex.DFlashStarts (0: one conversation a row)
	docIDs  []int32 // document: [batch, seq]
}

// problem builds the case of o (normalized) with the mask arguments drawn
// from r: documents of DocLen tokens packed one after another; for dflash,
// Anchors distinct sorted anchors in [1, Context), the same in every
// sequence, and block starts 0 (unpacked rows), as bench/flex_peer.py draws
// them.
func (o Options) problem(r *rand.Rand) (*attnCase, error) {
	sq := flex.Dims{Batch: o.Batch, HeadsQ: o.Heads, HeadsKV: o.KVHeads, LenQ: o.Seq, LenKV: o.Seq, HeadDim: o.HeadDim}
	c := &attnCase{dims: sq, args: flex.NewArgs()}
	S := float64(o.Seq)
	switch o.Mask {
	case "causal":
		c.mask, c.pairs = flex.Causal(), float64(o.Batch)*S*(S+1)/2
	case "window":
		c.mask = flex.SlidingWindow(o.Window)
		for i := 0; i < o.Seq; i++ {
			c.pairs += float64(min(i+1, o.Window))
		}
		c.pairs *= float64(o.Batch)
	case "document":
		c.mask = flex.Document(true)
		ids := make([]int32, o.Batch*o.Seq)
		for i := range ids {
			ids[i] = int32((i % o.Seq) / o.DocLen)
		}
		c.args.SetIntTensor(flex.DocIDs, ids, o.Batch, o.Seq)
		c.docIDs = ids
		for s := 0; s < o.Seq; s += o.DocLen {
			l := float64(min(o.DocLen, o.Seq-s))
			c.pairs += l * (l + 1) / 2
		}
		c.pairs *= float64(o.Batch)
	case "dflash":
		if o.Context < 2 || o.Anchors > o.Context-1 {
			return nil, fmt.Errorf("--anchors %d distinct anchors need --context > %d (have %d)", o.Anchors, o.Anchors, o.Context)
		}
		c.dims = flex.DFlashDims(o.Batch, o.Heads, o.KVHeads, o.Anchors, o.BlockSize, o.Context, o.HeadDim)
		c.mask, c.dflash = flex.DFlashMask(o.BlockSize), true
		perm := r.Perm(o.Context - 1)[:o.Anchors]
		row := make([]int32, o.Anchors)
		for i, p := range perm {
			row[i] = int32(p + 1)
		}
		slices.Sort(row)
		an := make([]int32, 0, o.Batch*o.Anchors)
		for b := 0; b < o.Batch; b++ {
			an = append(an, row...)
		}
		c.anchors, c.starts = an, make([]int32, len(an))
		c.args = flex.DFlashArgs(o.Context, c.anchors, c.starts, o.Anchors, nil)
		for _, a := range row { // a block sees the a context positions before it and itself
			c.pairs += float64(o.BlockSize) * float64(int(a)+o.BlockSize)
		}
		c.pairs *= float64(o.Batch)
	default:
		return nil, fmt.Errorf("--mask %q: unknown mask (causal, dflash, document or window)", o.Mask)
	}
	return c, nil
}

// newCaseRand returns the generator the mask arguments and the CPU inputs
// are drawn from, the same on both devices.
func newCaseRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed+1)) }
