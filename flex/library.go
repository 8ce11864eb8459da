package flex

import (
	"fmt"
	"math"
)

// Parameter names read by the library programs.
const (
	// DFlashCtxLen is the int scalar holding the context length CtxLen.
	DFlashCtxLen = "ctx_len"
	// DFlashAnchors is the int tensor [Batch, NumBlocks] of anchor positions.
	DFlashAnchors = "anchors"
	// DFlashStarts is the int tensor [Batch, NumBlocks] of the first context
	// position each draft block may see: the start of its packed
	// conversation.
	DFlashStarts = "block_starts"
	// DFlashNumValid is the int tensor [Batch] of valid (non-padding) blocks.
	DFlashNumValid = "num_valid"
	// DocIDs is the int tensor [Batch, Len] of document ids for Document.
	DocIDs = "doc_ids"
	// PrefixLen is the int tensor [Batch] of prefix lengths for PrefixLM.
	PrefixLen = "prefix_len"
	// ALiBiSlopesName is the float tensor [HeadsQ] of ALiBi slopes.
	ALiBiSlopesName = "alibi_slopes"
	// RelBiasName is the float tensor [HeadsQ, 2*MaxDist+1] for RelativeBias.
	RelBiasName = "rel_bias"
	// SoftcapName is the float scalar of SoftcapScalar.
	SoftcapName = "softcap"
)

// Causal allows q >= kv (top-left aligned: query i sees keys 0..i).
func Causal() *MaskProgram { return NewMask("causal", Q().Ge(KV())) }

// SlidingWindow allows kv <= q < kv + w: causal attention to the last w keys
// including the query's own position. It panics when w < 1.
func SlidingWindow(w int) *MaskProgram {
	if w < 1 {
		panic(fmt.Sprintf("flex: SlidingWindow(%d): window < 1", w))
	}
	return NewMask(fmt.Sprintf("window%d", w), Q().Ge(KV()).And(Q().Sub(KV()).Lt(Const(w))))
}

// PrefixLM allows kv <= q or kv < prefix_len[b]: bidirectional attention
// inside each sequence's prefix, causal after it. Args: int tensor
// PrefixLen [Batch].
func PrefixLM() *MaskProgram {
	p := IntTensorParam(PrefixLen, 1)
	return NewMask("prefixlm", KV().Le(Q()).Or(KV().Lt(p.At(B()))))
}

// Document allows pairs in the same packed document, doc_ids[b, q] ==
// doc_ids[b, kv], and when causal also q >= kv. Args: int tensor DocIDs
// [Batch, Len] with Len >= max(LenQ, LenKV) (queries and keys index the same
// packed sequence).
func Document(causal bool) *MaskProgram {
	d := IntTensorParam(DocIDs, 2)
	e := d.At(B(), Q()).Eq(d.At(B(), KV()))
	name := "document"
	if causal {
		e = e.And(Q().Ge(KV()))
		name = "document_causal"
	}
	return NewMask(name, e)
}

// DFlashMask is the DFlash training mask for draft blocks of blockSize
// positions (a structural constant).
//
// Layout. Queries are the NumBlocks*blockSize draft positions; query q
// belongs to block j = q / blockSize. Keys are [context ; draft blocks]: kv
// in [0, CtxLen) is a context position, kv >= CtxLen is draft position
// kv - CtxLen, so LenKV = CtxLen + NumBlocks*blockSize and LenQ =
// NumBlocks*blockSize. A query of block j of batch element b may see
//
//   - context positions of its own conversation strictly before its block's
//     anchor: kv < CtxLen and block_starts[b, j] <= kv < anchors[b, j];
//   - every position of its own block (bidirectional): kv >= CtxLen and
//     (kv - CtxLen) / blockSize == j;
//
// and nothing at all when j >= num_valid[b] (padding blocks; their rows give
// output 0 and lse -Inf).
//
// A context row may hold several conversations packed back to back; the
// block of an anchor in conversation [s, e) of the row has block_starts s,
// so that it sees nothing of the conversations before its own (those after
// it lie past the anchor). An unpacked row has block_starts 0.
//
// Args: int scalar DFlashCtxLen (CtxLen, a run-time value), int tensor
// DFlashAnchors [Batch, NumBlocks] (anchor positions in [0, CtxLen); sort
// them ascending per row for the tightest block masks), int tensor
// DFlashStarts [Batch, NumBlocks] (the first context position of each
// block's conversation), int tensor DFlashNumValid [Batch] (number of valid
// blocks, the first ones). DFlashArgs builds them.
func DFlashMask(blockSize int) *MaskProgram {
	if blockSize < 1 {
		panic(fmt.Sprintf("flex: DFlashMask(%d): block size < 1", blockSize))
	}
	bs := Const(blockSize)
	ctx := IntScalar(DFlashCtxLen)
	anchors := IntTensorParam(DFlashAnchors, 2)
	starts := IntTensorParam(DFlashStarts, 2)
	valid := IntTensorParam(DFlashNumValid, 1)
	j := Q().Div(bs)
	inCtx := KV().Lt(ctx).And(KV().Ge(starts.At(B(), j))).And(KV().Lt(anchors.At(B(), j)))
	own := KV().Ge(ctx).And(KV().Sub(ctx).Div(bs).Eq(j))
	p := NewMask(fmt.Sprintf("dflash%d", blockSize), j.Lt(valid.At(B())).And(inCtx.Or(own)))
	p.dflashBlock = blockSize
	return p
}

// DFlashArgs returns the Args of DFlashMask: anchors and starts are
// row-major [batch, numBlocks] (starts nil means every block's conversation
// starts at 0: unpacked rows) and numValid has one entry per batch element
// (nil means every block is valid). It panics on inconsistent lengths.
func DFlashArgs(ctxLen int, anchors, starts []int32, numBlocks int, numValid []int32) *Args {
	if numBlocks < 1 || len(anchors)%numBlocks != 0 || len(anchors) == 0 {
		panic(fmt.Sprintf("flex: DFlashArgs: %d anchors is not a positive multiple of %d blocks", len(anchors), numBlocks))
	}
	batch := len(anchors) / numBlocks
	if starts == nil {
		starts = make([]int32, len(anchors))
	}
	if len(starts) != len(anchors) {
		panic(fmt.Sprintf("flex: DFlashArgs: %d block starts for %d anchors", len(starts), len(anchors)))
	}
	if numValid == nil {
		numValid = make([]int32, batch)
		for i := range numValid {
			numValid[i] = int32(numBlocks)
		}
	}
	if len(numValid) != batch {
		panic(fmt.Sprintf("flex: DFlashArgs: %d num_valid entries for batch %d", len(numValid), batch))
	}
	return NewArgs().SetInt(DFlashCtxLen, ctxLen).
		SetIntTensor(DFlashAnchors, anchors, batch, numBlocks).
		SetIntTensor(DFlashStarts, starts, batch, numBlocks).
		SetIntTensor(DFlashNumValid, numValid, batch)
}

// DFlashDims returns the attention dimensions of the DFlash mask.
func DFlashDims(batch, headsQ, headsKV, numBlocks, blockSize, ctxLen, headDim int) Dims {
	return Dims{Batch: batch, HeadsQ: headsQ, HeadsKV: headsKV, LenQ: numBlocks * blockSize,
		LenKV: ctxLen + numBlocks*blockSize, HeadDim: headDim}
}

// Softcap returns c * tanh(score / c) for a structural constant c > 0.
// Gradient: d/dscore = 1 - tanh²(score / c).
func Softcap(c float64) *ScoreProgram {
	if !(c > 0) {
		panic(fmt.Sprintf("flex: Softcap(%v): cap must be > 0", c))
	}
	return NewScore(fmt.Sprintf("softcap%g", c), F(c).Mul(Score().Div(F(c)).Tanh()))
}

// SoftcapScalar is Softcap with the cap read from the float scalar
// SoftcapName at run time.
func SoftcapScalar() *ScoreProgram {
	c := FloatScalar(SoftcapName)
	return NewScore("softcap", c.Mul(Score().Div(c).Tanh()))
}

// ALiBi returns score + slope[h] * (kv - q) with slopes from the float tensor
// ALiBiSlopesName [HeadsQ] (ALiBiSlopes gives the standard ones). Backward
// returns the gradient of the slopes.
func ALiBi() *ScoreProgram {
	s := FloatTensorParam(ALiBiSlopesName, 1)
	return NewScore("alibi", Score().Add(s.At(H()).Mul(KV().Sub(Q()).Float())))
}

// ALiBiSlopes returns the standard ALiBi slopes for heads heads:
// 2^(-8(i+1)/n) for n a power of two, interleaved as in the ALiBi paper
// otherwise.
func ALiBiSlopes(heads int) []float64 {
	pow2 := func(n int) []float64 {
		s := make([]float64, n)
		for i := range s {
			s[i] = math.Pow(2, -8*float64(i+1)/float64(n))
		}
		return s
	}
	n := 1
	for n*2 <= heads {
		n *= 2
	}
	s := pow2(n)
	if n < heads {
		extra := pow2(2 * n)
		for i := 0; len(s) < heads; i += 2 {
			s = append(s, extra[i])
		}
	}
	return s
}

// RelativeBias returns score + rel_bias[h, clamp(q - kv, -maxDist, maxDist) +
// maxDist] with the float tensor RelBiasName [HeadsQ, 2*maxDist+1]
// (maxDist is structural). Backward returns the table's gradient.
func RelativeBias(maxDist int) *ScoreProgram {
	if maxDist < 0 {
		panic(fmt.Sprintf("flex: RelativeBias(%d): negative distance", maxDist))
	}
	t := FloatTensorParam(RelBiasName, 2)
	rel := Q().Sub(KV()).Clamp(Const(-maxDist), Const(maxDist)).Add(Const(maxDist))
	return NewScore(fmt.Sprintf("relbias%d", maxDist), Score().Add(t.At(H(), rel)))
}
