package dflash

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"dflash/tensor"
)

// Batch is the drafter's training input: R token sequences padded to a common
// length S, their loss masks, and the target's hidden states at the taps.
type Batch struct {
	Rows, Len int
	IDs       []int32 // [Rows*Len]
	LossMask  []uint8 // [Rows*Len], 1 on positions whose token is a label (assistant tokens)
	SeqLen    []int   // [Rows], true lengths (<= Len; 0 for an empty pad row)
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

// Samples returns the number of sequences of the batch: its rows that
// are not empty padding rows.
func (b *Batch) Samples() int {
	n := 0
	for _, l := range b.SeqLen {
		if l > 0 {
			n++
		}
	}
	return n
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

// ExampleAnchors samples the anchors of every row of b, row r (example
// examples[r]; rows past len(examples) are padding and get none) from its
// own stream (seed, examples[r]): an example's anchors depend on the seed
// and the example alone, not on the batch it is in, so that data-parallel
// ranks, which split a global batch, draw what one rank with the whole
// batch draws, and a resume on another rank count continues alike.
func ExampleAnchors(seed uint64, examples []int, b *Batch, n int) [][]int32 {
	out := make([][]int32, b.Rows)
	for r := range min(b.Rows, len(examples)) {
		rng := rand.New(rand.NewPCG(seed, uint64(examples[r])))
		out[r] = SampleAnchors(rng, Candidates(b.LossMask[r*b.Len:(r+1)*b.Len], b.SeqLen[r]), n)
	}
	return out
}

// SampleBatchAnchors samples the anchors of every row of b in row order.
func SampleBatchAnchors(rng *rand.Rand, b *Batch, n int) [][]int32 {
	out := make([][]int32, b.Rows)
	for r := 0; r < b.Rows; r++ {
		out[r] = SampleAnchors(rng, Candidates(b.LossMask[r*b.Len:(r+1)*b.Len], b.SeqLen[r]), n)
	}
	return out
}

// Blocks is the block layout of a batch for given anchors: every row has N
// blocks of B slots; row r's first NumValid[r] blocks are live, the rest dead
// (anchor 0, every slot the mask token, no labels).
type Blocks struct {
	Rows, N, B int
	Anchors    []int32   // [Rows*N]
	NumValid   []int32   // [Rows]
	IDs        []int32   // [Rows*N*B] block input ids
	Pos        []int32   // [Rows*N*B] RoPE positions a+s
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
		Anchors: make([]int32, b.Rows*n), NumValid: make([]int32, b.Rows),
		IDs: make([]int32, b.Rows*n*B), Pos: make([]int32, b.Rows*n*B),
		Labels: make([]int32, b.Rows*n*B), Weights: make([]float64, b.Rows*n*B)}
	for i := range bl.IDs {
		bl.IDs[i] = int32(c.MaskTokenID)
		bl.Labels[i] = -1
	}
	for r := 0; r < b.Rows; r++ {
		ids := b.IDs[r*b.Len : (r+1)*b.Len]
		mask := b.LossMask[r*b.Len : (r+1)*b.Len]
		L := b.SeqLen[r]
		bl.NumValid[r] = int32(len(anchors[r]))
		for j := 0; j < n; j++ {
			var a int32
			live := j < len(anchors[r])
			if live {
				a = anchors[r][j]
				if a < 0 || int(a)+1 >= L || mask[a] == 0 || mask[a+1] == 0 {
					panic(fmt.Sprintf("dflash: BuildBlocks: row %d anchor %d is not a candidate", r, a))
				}
				if j > 0 && a <= anchors[r][j-1] {
					panic(fmt.Sprintf("dflash: BuildBlocks: row %d anchors not strictly ascending", r))
				}
			}
			bl.Anchors[r*n+j] = a
			base := (r*n + j) * B
			for s := 0; s < B; s++ {
				bl.Pos[base+s] = a + int32(s)
			}
			if !live {
				continue
			}
			bl.IDs[base] = ids[a]
			for s := 1; s < B; s++ {
				p := int(a) + s
				if p < L && mask[p] != 0 {
					bl.Labels[base+s] = ids[p]
					bl.Weights[base+s] = w[s]
					bl.WeightSum += w[s]
				}
			}
		}
	}
	return bl
}
