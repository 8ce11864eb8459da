package dflash

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"dflash/tensor"
)

// Batch is the drafter's training input: R rows of S tokens, each holding
// one sample padded to S or, packed, several back to back; their loss masks,
// and the target's hidden states at the taps.
type Batch struct {
	Rows, Len int
	IDs       []int32 // [Rows*Len]
	LossMask  []uint8 // [Rows*Len], 1 on positions whose token is a label (assistant tokens)
	SeqLen    []int   // [Rows], the tokens a row's samples take (<= Len; 0 for an empty pad row)
	// Segs lists the samples of each row in order (RowSegs): nil means one
	// sample a row, [0, SeqLen[r]).
	Segs [][]Seg
	// Packed marks rows of several samples (MakePackedBatch): attention stays
	// inside each sample, for the target (a document mask, TargetHidden)
	// and the drafter (the blocks' context starts, Blocks.Starts), and
	// positions restart at each sample's start (Positions).
	Packed bool
	// Taps are the target's hidden states at the taps, one [Rows*Len, H]
	// tensor per tap, in tap order, on the backend of the step.
	Taps []*tensor.Tensor
	// Fixed marks a batch in its length bucket's shape (MakeFixedBatch):
	// every batch of the bucket repeats the same work, so the target's and
	// the drafter's passes over it are replayed regions
	// (tensor.Backend.Replay).
	Fixed bool
	// Replays lists what tensor.Backend.Replay did for the batch's
	// regions, in order ("eager", "captured", "launched", ...).
	Replays []string
}

// Tokens returns the real tokens of the batch: Σ SeqLen.
func (b *Batch) Tokens() int {
	n := 0
	for _, l := range b.SeqLen {
		n += l
	}
	return n
}

// Seg is one sample of a batch row: the row's positions [Start,
// Start+Len), example Example of its set (-1 when unknown).
type Seg struct{ Start, Len, Example int }

// End returns the position after the sample.
func (s Seg) End() int { return s.Start + s.Len }

// RowSegs returns the samples of row r: Segs[r], or without Segs the one
// sample [0, SeqLen[r]) (none for an empty row).
func (b *Batch) RowSegs(r int) []Seg {
	if b.Segs != nil {
		return b.Segs[r]
	}
	if b.SeqLen[r] == 0 {
		return nil
	}
	return []Seg{{0, b.SeqLen[r], -1}}
}

// Samples returns the number of samples of the batch.
func (b *Batch) Samples() int {
	n := 0
	for r := range b.Rows {
		n += len(b.RowSegs(r))
	}
	return n
}

// Positions returns the RoPE position of every token, [Rows*Len]: its
// offset in its sample, the positions after a row's last sample continuing
// that sample's (0..Len−1 in a row of one sample or none).
func (b *Batch) Positions() []int32 {
	pos := make([]int32, 0, b.Rows*b.Len)
	for r := range b.Rows {
		segs, k, start := b.RowSegs(r), 0, 0
		for i := range b.Len {
			if k < len(segs) && segs[k].Start == i {
				start, k = i, k+1
			}
			pos = append(pos, int32(i-start))
		}
	}
	return pos
}

// DocIDs returns the sample of every token within its row, [Rows*Len]: 0,
// 1, ... in row order, and the number of the row's samples after its last
// one (the padding is a document of its own).
func (b *Batch) DocIDs() []int32 {
	ids := make([]int32, 0, b.Rows*b.Len)
	for r := range b.Rows {
		segs, k := b.RowSegs(r), 0
		for i := range b.Len {
			for k < len(segs) && i >= segs[k].End() {
				k++
			}
			ids = append(ids, int32(k))
		}
	}
	return ids
}

// PadFraction returns the padded share of the batch's Rows×Len positions:
// 1 − Tokens/(Rows·Len) (0 for an empty batch).
func (b *Batch) PadFraction() float64 {
	if b.Rows*b.Len == 0 {
		return 0
	}
	return 1 - float64(b.Tokens())/float64(b.Rows*b.Len)
}

// Check panics when the batch's slices disagree with its shape.
func (b *Batch) Check(hidden, taps int) {
	if len(b.IDs) != b.Rows*b.Len || len(b.LossMask) != b.Rows*b.Len || len(b.SeqLen) != b.Rows {
		panic(fmt.Sprintf("dflash: Batch %dx%d: %d ids, %d mask, %d lengths", b.Rows, b.Len, len(b.IDs), len(b.LossMask), len(b.SeqLen)))
	}
	if len(b.Taps) != taps {
		panic(fmt.Sprintf("dflash: Batch has %d hidden-state taps, the drafter reads %d", len(b.Taps), taps))
	}
	for i, h := range b.Taps {
		if h.Numel() != b.Rows*b.Len*hidden {
			panic(fmt.Sprintf("dflash: Batch tap %d: %v, want %d values", i, h, b.Rows*b.Len*hidden))
		}
	}
	for r, n := range b.SeqLen {
		if n < 0 || n > b.Len {
			panic(fmt.Sprintf("dflash: Batch row %d: length %d outside [0, %d]", r, n, b.Len))
		}
	}
	if b.Segs != nil && len(b.Segs) != b.Rows {
		panic(fmt.Sprintf("dflash: Batch has samples of %d rows, %d rows", len(b.Segs), b.Rows))
	}
	for r := range b.Segs {
		end := 0
		for _, s := range b.Segs[r] {
			if s.Start < end || s.Len < 1 || s.End() > b.Len {
				panic(fmt.Sprintf("dflash: Batch row %d: samples %v overlap or leave the row of %d", r, b.Segs[r], b.Len))
			}
			end = s.End()
		}
	}
}

// Candidates returns the anchor candidates of one sequence (docs/DRAFTER.md
// §4.2): positions t <= seqLen-2 with mask[t] and mask[t+1] set, ascending.
func Candidates(mask []uint8, seqLen int) []int32 {
	var c []int32
	for t := 0; t+1 < seqLen; t++ {
		if mask[t] != 0 && mask[t+1] != 0 {
			c = append(c, int32(t))
		}
	}
	return c
}

// SampleAnchors draws min(n, len(cands)) candidates uniformly without
// replacement (a partial Fisher–Yates shuffle of a copy of cands) and returns
// them sorted ascending.
func SampleAnchors(rng *rand.Rand, cands []int32, n int) []int32 {
	c := slices.Clone(cands)
	k := min(n, len(c))
	for i := 0; i < k; i++ {
		j := i + rng.IntN(len(c)-i)
		c[i], c[j] = c[j], c[i]
	}
	out := c[:k]
	slices.Sort(out)
	return out
}

// rowCandidates returns the anchor candidates of each sample of row r of
// b, at their positions in the row.
func rowCandidates(b *Batch, r int) [][]int32 {
	segs := b.RowSegs(r)
	out := make([][]int32, len(segs))
	for k, sg := range segs {
		c := Candidates(b.LossMask[r*b.Len+sg.Start:r*b.Len+sg.End()], sg.Len)
		for i := range c {
			c[i] += int32(sg.Start)
		}
		out[k] = c
	}
	return out
}

// ExampleAnchors samples the anchors of every row of b: each sample at
// most n of its candidates, drawn from its own stream (seed, its example):
// an example's anchors depend on the seed and the example alone, not on the
// batch or the row it is in, so that data-parallel ranks, which split a
// global batch, draw what one rank with the whole batch draws, a resume on
// another rank count continues alike, and a packed row draws what rows of
// one sample each would. With blocks > 0 a row's samples share at most
// blocks anchors: when they want more, each keeps its share in proportion to
// what it wants (AnchorShares), the first of the anchors it would draw.
func ExampleAnchors(seed uint64, b *Batch, n, blocks int) [][]int32 {
	out := make([][]int32, b.Rows)
	for r := range b.Rows {
		segs, cands := b.RowSegs(r), rowCandidates(b, r)
		want := make([]int, len(segs))
		for k := range segs {
			want[k] = min(n, len(cands[k]))
		}
		for k, keep := range AnchorShares(want, blocks) {
			rng := rand.New(rand.NewPCG(seed, uint64(segs[k].Example)))
			out[r] = append(out[r], SampleAnchors(rng, cands[k], keep)...)
		}
	}
	return out
}

// AnchorShares returns how many of the anchors want[k] each sample of a row
// keeps when the row has room for blocks (0: no limit): all of them when
// they fit, else shares of blocks in proportion to want, floored, the
// blocks left over going one each to the largest remainders (the earlier
// sample on a tie).
func AnchorShares(want []int, blocks int) []int {
	total := 0
	for _, w := range want {
		total += w
	}
	if blocks <= 0 || total <= blocks {
		return want
	}
	keep := make([]int, len(want))
	rem := make([]int, len(want))
	left := blocks
	for k, w := range want {
		keep[k] = w * blocks / total
		rem[k] = w * blocks % total
		left -= keep[k]
	}
	for ; left > 0; left-- {
		best := -1
		for k := range want {
			if keep[k] < want[k] && (best < 0 || rem[k] > rem[best]) {
				best = k
			}
		}
		keep[best]++
		rem[best] = -1
	}
	return keep
}

// SampleBatchAnchors samples the anchors of every row of b in row order,
// at most n for each of its samples.
func SampleBatchAnchors(rng *rand.Rand, b *Batch, n int) [][]int32 {
	out := make([][]int32, b.Rows)
	for r := 0; r < b.Rows; r++ {
		for _, c := range rowCandidates(b, r) {
			out[r] = append(out[r], SampleAnchors(rng, c, n)...)
		}
	}
	return out
}

// Blocks is the block layout of a batch for given anchors: every row has N
// blocks of B slots; row r's first NumValid[r] blocks are live, the rest dead
// (anchor 0, every slot the mask token, no labels).
type Blocks struct {
	Rows, N, B int
	Anchors    []int32   // [Rows*N]
	Starts     []int32   // [Rows*N] the start of each anchor's sample: the first context position its block sees
	NumValid   []int32   // [Rows]
	IDs        []int32   // [Rows*N*B] block input ids
	Pos        []int32   // [Rows*N*B] RoPE positions a+s, from the sample's start
	Labels     []int32   // [Rows*N*B] label ids, -1 where not valid
	Weights    []float64 // [Rows*N*B] v·w_s (0 where not valid)
	WeightSum  float64
	// Fixed marks the layout of a fixed-shape step (a length bucket's):
	// Inputs then keeps every block slot but the anchor's as a loss row
	// (tensor.NewXentRowsFixed), so that no shape of the step depends on its
	// labels.
	Fixed bool
}

// BuildBlocks lays out the blocks of b for anchors (one ascending list per
// row, each a candidate) following docs/DRAFTER.md §2.2 and §4.3, with as
// many blocks per row as the row with most anchors has (at least one). It
// panics when an anchor is not a candidate.
func BuildBlocks(c *Config, b *Batch, anchors [][]int32) *Blocks {
	n := 1
	for _, a := range anchors {
		n = max(n, len(a))
	}
	return BuildBlocksN(c, b, anchors, n)
}

// BuildBlocksN is BuildBlocks with exactly n blocks per row, the blocks
// past a row's anchors dead, so that the layout's shape does not depend on
// the anchors drawn (fixed-shape steps). A row without anchors (an empty pad
// row) has only dead blocks. It panics when n < 1 or a row has more than n
// anchors.
func BuildBlocksN(c *Config, b *Batch, anchors [][]int32, n int) *Blocks {
	if len(anchors) != b.Rows {
		panic(fmt.Sprintf("dflash: BuildBlocks: %d anchor lists for %d rows", len(anchors), b.Rows))
	}
	for r, a := range anchors {
		if len(a) > n || n < 1 {
			panic(fmt.Sprintf("dflash: BuildBlocks: row %d has %d anchors for %d blocks", r, len(a), n))
		}
	}
	B := c.BlockSize
	w := c.SlotWeights()
	bl := &Blocks{Rows: b.Rows, N: n, B: B,
		Anchors: make([]int32, b.Rows*n), Starts: make([]int32, b.Rows*n), NumValid: make([]int32, b.Rows),
		IDs: make([]int32, b.Rows*n*B), Pos: make([]int32, b.Rows*n*B),
		Labels: make([]int32, b.Rows*n*B), Weights: make([]float64, b.Rows*n*B)}
	for i := range bl.IDs {
		bl.IDs[i] = int32(c.MaskTokenID)
		bl.Labels[i] = -1
	}
	for r := 0; r < b.Rows; r++ {
		ids := b.IDs[r*b.Len : (r+1)*b.Len]
		mask := b.LossMask[r*b.Len : (r+1)*b.Len]
		segs, k := b.RowSegs(r), 0
		bl.NumValid[r] = int32(len(anchors[r]))
		for j := 0; j < n; j++ {
			var a int32
			var sg Seg
			live := j < len(anchors[r])
			if live {
				a = anchors[r][j]
				for k < len(segs) && int(a) >= segs[k].End() {
					k++
				}
				if k == len(segs) || int(a) < segs[k].Start || int(a)+1 >= segs[k].End() || mask[a] == 0 || mask[a+1] == 0 {
					panic(fmt.Sprintf("dflash: BuildBlocks: row %d anchor %d is not a candidate", r, a))
				}
				if j > 0 && a <= anchors[r][j-1] {
					panic(fmt.Sprintf("dflash: BuildBlocks: row %d anchors not strictly ascending", r))
				}
				sg = segs[k]
			}
			bl.Anchors[r*n+j] = a
			bl.Starts[r*n+j] = int32(sg.Start)
			base := (r*n + j) * B
			for s := 0; s < B; s++ {
				bl.Pos[base+s] = a - int32(sg.Start) + int32(s)
			}
			if !live {
				continue
			}
			bl.IDs[base] = ids[a]
			for s := 1; s < B; s++ {
				p := int(a) + s
				if p < sg.End() && mask[p] != 0 {
					bl.Labels[base+s] = ids[p]
					bl.Weights[base+s] = w[s]
					bl.WeightSum += w[s]
				}
			}
		}
	}
	return bl
}
