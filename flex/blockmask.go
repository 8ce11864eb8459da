package flex

import (
	"fmt"
	"sync/atomic"
	"time"

	"dflash/internal/ceil"
)

// DefaultBlock is the default block edge (queries and keys) of a BlockMask.
const DefaultBlock = 128

// Dims are the attention dimensions. q is [Batch, HeadsQ, LenQ, HeadDim], k and
// v are [Batch, HeadsKV, LenKV, HeadDim], out (and dout, its gradient) is
// like q, or [Batch, LenQ, HeadsQ, HeadDim] with OutHeadsInner, and lse is
// [Batch, HeadsQ, LenQ]; all row-major. HeadsQ is a multiple of HeadsKV:
// query head h reads kv head h / (HeadsQ / HeadsKV) (grouped-query
// attention).
type Dims struct {
	Batch, HeadsQ, HeadsKV, LenQ, LenKV, HeadDim int
	// OutHeadsInner lays out out and dout with the heads inside the query
	// rows, [Batch, LenQ, HeadsQ, HeadDim], so that merging the heads
	// ([Batch·LenQ, HeadsQ·HeadDim]) is a reshape, not a transpose. A block
	// mask does not depend on it.
	OutHeadsInner bool
}

// Check returns an error when d is not a valid attention shape.
func (d Dims) Check() error {
	if d.Batch < 1 || d.HeadsQ < 1 || d.HeadsKV < 1 || d.LenQ < 1 || d.LenKV < 1 || d.HeadDim < 1 {
		return fmt.Errorf("flex: dims %+v: every dimension must be >= 1", d)
	}
	if d.HeadsQ%d.HeadsKV != 0 {
		return fmt.Errorf("flex: dims %+v: HeadsQ %d is not a multiple of HeadsKV %d", d, d.HeadsQ, d.HeadsKV)
	}
	return nil
}

// Group returns HeadsQ / HeadsKV, the number of query heads per kv head.
func (d Dims) Group() int { return d.HeadsQ / d.HeadsKV }

// OutRow returns the offset in out (and dout) of the first element of row i
// of query head h in batch b.
func (d Dims) OutRow(b, h, i int) int {
	if d.OutHeadsInner {
		return ((b*d.LenQ+i)*d.HeadsQ + h) * d.HeadDim
	}
	return ((b*d.HeadsQ+h)*d.LenQ + i) * d.HeadDim
}

// OutStride returns the distance in out (and dout) between consecutive rows
// of one query head: HeadDim, or HeadsQ·HeadDim with OutHeadsInner.
func (d Dims) OutStride() int {
	if d.OutHeadsInner {
		return d.HeadsQ * d.HeadDim
	}
	return d.HeadDim
}

// BlockMask is the block-sparse structure of a mask program for given Dims:
// for every (batch, head, query block) the key blocks that are partial (some
// pairs allowed; the mask is applied per element) and full (every pair
// allowed; the mask is skipped), and the transposed lists for every key block
// used by the backward pass. Blocks in neither list are empty and skipped.
//
// Layout (as FlexAttention's, so it can be copied to a GPU as is): with
// r = (bb*MaskHeads + hh)*NumQBlocks + qb, KVNum[r] is the number of partial
// kv blocks of query block qb and KVIdx[r*NumKVBlocks : r*NumKVBlocks+KVNum[r]]
// their indices, ascending; FullKVNum and FullKVIdx likewise for full blocks.
// With c = (bb*MaskHeads + hh)*NumKVBlocks + kvb, QNum[c], QIdx[c*NumQBlocks:],
// FullQNum and FullQIdx list the query blocks of key block kvb. bb is the
// batch index, or 0 when the mask does not read it (MaskBatch == 1); hh is the
// query head, or 0 when the mask does not read it (MaskHeads == 1). Block qb
// covers queries [qb*BlockQ, min((qb+1)*BlockQ, LenQ)).
type BlockMask struct {
	Dims                    Dims
	BlockQ, BlockKV         int
	NumQBlocks, NumKVBlocks int
	MaskBatch, MaskHeads    int

	KVNum, KVIdx, FullKVNum, FullKVIdx []int32
	QNum, QIdx, FullQNum, FullQIdx     []int32

	Stats BlockMaskStats

	mask  *MaskProgram
	args  *Args
	frame *frame
	rows  *rowProg
}

// BlockMaskStats describes how a BlockMask was built.
type BlockMaskStats struct {
	Empty, Partial, Full int // final classification, over MaskBatch*MaskHeads*NumQBlocks*NumKVBlocks blocks
	IntervalPartial      int // blocks interval evaluation left undecided
	Refined              int // undecided blocks that were then evaluated per element
	Build                time.Duration
	Bytes                int // memory of the index arrays
}

// BlockMaskOption configures NewBlockMask.
type BlockMaskOption func(*buildConfig)

type buildConfig struct {
	refine bool
	exact  bool
}

// NoRefine keeps blocks that interval evaluation cannot decide as partial,
// without evaluating them per element.
func NoRefine() BlockMaskOption { return func(c *buildConfig) { c.refine = false } }

// Exact classifies every block by evaluating all its pairs (no interval
// evaluation): exact, still O(blocks) memory, but O(LenQ*LenKV) time. For
// measuring how tight the default classification is.
func Exact() BlockMaskOption { return func(c *buildConfig) { c.exact = true } }

// NewBlockMask classifies every (batch, head, query block, key block) of m
// under d as empty, partial or full without a dense mask, in memory
// proportional to the number of blocks. Classification is sound: empty and
// full only when certain. Interval evaluation over the block's ranges (with
// range minima and maxima of the tensors read) decides most blocks; by
// default the undecided ones are then evaluated per element with an early
// exit as soon as both an allowed and a masked pair are seen. blockQ and
// blockKV default to DefaultBlock when 0. It returns an error when args lack
// a parameter m reads or d is invalid, and in the checked mode (see
// Args.Check) an *IndexError when m reads a tensor out of range at some
// pair (every pair is then evaluated).
func NewBlockMask(m *MaskProgram, args *Args, d Dims, blockQ, blockKV int, opts ...BlockMaskOption) (*BlockMask, error) {
	start := time.Now()
	if err := d.Check(); err != nil {
		return nil, err
	}
	cfg := buildConfig{refine: true}
	for _, o := range opts {
		o(&cfg)
	}
	if blockQ == 0 {
		blockQ = DefaultBlock
	}
	if blockKV == 0 {
		blockKV = DefaultBlock
	}
	if blockQ < 1 || blockKV < 1 {
		return nil, fmt.Errorf("flex: block sizes %dx%d must be >= 1", blockQ, blockKV)
	}
	f, err := bind(m.plan, "mask "+m.name, args)
	if err != nil {
		return nil, err
	}
	bm := &BlockMask{Dims: d, BlockQ: blockQ, BlockKV: blockKV,
		NumQBlocks: ceil.Div(d.LenQ, blockQ), NumKVBlocks: ceil.Div(d.LenKV, blockKV),
		MaskBatch: 1, MaskHeads: 1, mask: m, args: args, frame: f, rows: compileRows(m.plan, blockKV)}
	if m.plan.readsB {
		bm.MaskBatch = d.Batch
	}
	if m.plan.readsH {
		bm.MaskHeads = d.HeadsQ
	}
	nq, nkv := bm.NumQBlocks, bm.NumKVBlocks
	rows := bm.MaskBatch * bm.MaskHeads * nq
	bm.KVNum, bm.FullKVNum = make([]int32, rows), make([]int32, rows)
	bm.KVIdx, bm.FullKVIdx = make([]int32, rows*nkv), make([]int32, rows*nkv)
	if !cfg.exact {
		buildRangeTables(m.plan, f)
	}

	var nPartial, nFull, nIval, nRefined atomic.Int64
	workers := workerCount(rows)
	ivals := make([]*ivalEval, workers)
	evals := make([]*rowEval, workers)
	bufs := make([][]bool, workers)
	parallelFor(rows, workers, func(w, r int) {
		if evals[w] == nil {
			ivals[w] = newIvalEval(m.plan, f)
			evals[w] = bm.rows.newEval(f)
			bufs[w] = make([]bool, blockKV)
		}
		iv, ev := ivals[w], evals[w]
		qb := r % nq
		bh := r / nq
		b, h := bh/bm.MaskHeads, bh%bm.MaskHeads
		q0, q1 := qb*blockQ, min((qb+1)*blockQ, d.LenQ)
		ev.setBH(b, h)
		if !cfg.exact {
			iv.setRows(b, h, q0, q1)
		}
		var np, nf, ni, nr int32
		part := bm.KVIdx[r*nkv : (r+1)*nkv]
		full := bm.FullKVIdx[r*nkv : (r+1)*nkv]
		for kvb := 0; kvb < nkv; kvb++ {
			k0, k1 := kvb*blockKV, min((kvb+1)*blockKV, d.LenKV)
			var canT, canF bool
			if cfg.exact {
				canT, canF = scanBlock(ev, bufs[w], q0, q1, k0, k1)
			} else {
				canT, canF = iv.classify(k0, k1)
				if canT && canF {
					ni++
					if cfg.refine {
						nr++
						canT, canF = scanBlock(ev, bufs[w], q0, q1, k0, k1)
					}
				}
			}
			switch {
			case canT && canF:
				part[np] = int32(kvb)
				np++
			case canT:
				full[nf] = int32(kvb)
				nf++
			}
		}
		bm.KVNum[r], bm.FullKVNum[r] = np, nf
		nPartial.Add(int64(np))
		nFull.Add(int64(nf))
		nIval.Add(int64(ni))
		nRefined.Add(int64(nr))
	})
	for _, t := range f.tensors {
		if t != nil {
			t.rmq = nil // only needed while classifying
		}
	}
	bm.transpose()
	total := rows * nkv
	bm.Stats = BlockMaskStats{Partial: int(nPartial.Load()), Full: int(nFull.Load()),
		IntervalPartial: int(nIval.Load()), Refined: int(nRefined.Load())}
	bm.Stats.Empty = total - bm.Stats.Partial - bm.Stats.Full
	if cfg.exact {
		bm.Stats.IntervalPartial = -1
	}
	bm.Stats.Bytes = 4 * (len(bm.KVNum) + len(bm.KVIdx) + len(bm.FullKVNum) + len(bm.FullKVIdx) +
		len(bm.QNum) + len(bm.QIdx) + len(bm.FullQNum) + len(bm.FullQIdx))
	if f.check != nil {
		if err := checkAllPairs(bm); err != nil {
			return nil, err
		}
	}
	bm.Stats.Build = time.Since(start)
	return bm, nil
}

// scanBlock evaluates every pair of the block until it has seen both an
// allowed and a masked pair; it visits the first and last rows first.
func scanBlock(ev *rowEval, buf []bool, q0, q1, k0, k1 int) (canT, canF bool) {
	n := k1 - k0
	visit := func(q int) bool {
		ev.setRow(q)
		ev.mask(k0, n, buf)
		for _, v := range buf[:n] {
			if v {
				canT = true
			} else {
				canF = true
			}
		}
		return canT && canF
	}
	if visit(q0) || (q1-1 > q0 && visit(q1-1)) {
		return
	}
	for q := q0 + 1; q < q1-1; q++ {
		if visit(q) {
			return
		}
	}
	return
}

// transpose fills the q-side lists from the kv-side lists.
func (bm *BlockMask) transpose() {
	nq, nkv := bm.NumQBlocks, bm.NumKVBlocks
	cols := bm.MaskBatch * bm.MaskHeads * nkv
	bm.QNum, bm.FullQNum = make([]int32, cols), make([]int32, cols)
	bm.QIdx, bm.FullQIdx = make([]int32, cols*nq), make([]int32, cols*nq)
	for bh := 0; bh < bm.MaskBatch*bm.MaskHeads; bh++ {
		for qb := 0; qb < nq; qb++ {
			part, full := bm.kvRow(bh*nq + qb)
			for _, kvb := range part {
				c := bh*nkv + int(kvb)
				bm.QIdx[c*nq+int(bm.QNum[c])] = int32(qb)
				bm.QNum[c]++
			}
			for _, kvb := range full {
				c := bh*nkv + int(kvb)
				bm.FullQIdx[c*nq+int(bm.FullQNum[c])] = int32(qb)
				bm.FullQNum[c]++
			}
		}
	}
}

func (bm *BlockMask) bh(b, h int) int {
	if bm.MaskBatch == 1 {
		b = 0
	}
	if bm.MaskHeads == 1 {
		h = 0
	}
	return b*bm.MaskHeads + h
}

// KVBlocks returns the partial and full key blocks of query block qb of
// batch b and query head h (slices into the BlockMask; do not modify).
func (bm *BlockMask) KVBlocks(b, h, qb int) (partial, full []int32) {
	return bm.kvRow(bm.bh(b, h)*bm.NumQBlocks + qb)
}

// kvRow returns the partial and full key blocks of row r = bh*NumQBlocks + qb.
func (bm *BlockMask) kvRow(r int) (partial, full []int32) {
	o := r * bm.NumKVBlocks
	return bm.KVIdx[o : o+int(bm.KVNum[r])], bm.FullKVIdx[o : o+int(bm.FullKVNum[r])]
}

// QBlocks returns the partial and full query blocks of key block kvb of
// batch b and query head h (slices into the BlockMask; do not modify).
func (bm *BlockMask) QBlocks(b, h, kvb int) (partial, full []int32) {
	c := bm.bh(b, h)*bm.NumKVBlocks + kvb
	o := c * bm.NumQBlocks
	return bm.QIdx[o : o+int(bm.QNum[c])], bm.FullQIdx[o : o+int(bm.FullQNum[c])]
}

// Mask returns the mask program bm was built from.
func (bm *BlockMask) Mask() *MaskProgram { return bm.mask }

// Args returns the arguments bm was built with.
func (bm *BlockMask) Args() *Args { return bm.args }

// Density returns the fraction of the LenQ x LenKV area covered by
// non-empty blocks (averaged over batch and heads).
func (bm *BlockMask) Density() float64 {
	var area float64
	for bh := 0; bh < bm.MaskBatch*bm.MaskHeads; bh++ {
		for qb := 0; qb < bm.NumQBlocks; qb++ {
			rq := float64(min((qb+1)*bm.BlockQ, bm.Dims.LenQ) - qb*bm.BlockQ)
			part, full := bm.kvRow(bh*bm.NumQBlocks + qb)
			for _, l := range [2][]int32{part, full} {
				for _, kvb := range l {
					area += rq * float64(min((int(kvb)+1)*bm.BlockKV, bm.Dims.LenKV)-int(kvb)*bm.BlockKV)
				}
			}
		}
	}
	return area / (float64(bm.MaskBatch*bm.MaskHeads) * float64(bm.Dims.LenQ) * float64(bm.Dims.LenKV))
}

// Allowed reports whether the mask allows (b, h, q, kv), evaluating the
// program for that one pair (slow; for tests and tools).
func (bm *BlockMask) Allowed(b, h, q, kv int) bool {
	ev := bm.rows.newEval(bm.frame)
	ev.setBH(b, h)
	ev.setRow(q)
	var out [1]bool
	ev.mask(kv, 1, out[:])
	return out[0]
}
