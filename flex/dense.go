package flex

import (
	"fmt"

	"dflash/internal/ceil"
)

// DenseMask is a mask program evaluated densely: one bool per (q, kv) pair
// for each batch element and head it depends on. It is the input of the
// dense reference path (DenseForward, DenseBackward), which computes every
// score like an unfused masked attention does, and is built only when it
// fits a memory budget.
type DenseMask struct {
	Dims                 Dims
	MaskBatch, MaskHeads int
	OK                   []bool // [MaskBatch, MaskHeads, LenQ, LenKV]
}

// NewDenseMask evaluates m over every pair of d. It returns an error when
// the mask would take more than maxBytes (0 means no limit), giving the
// numbers, or when args lack a parameter of m.
func NewDenseMask(m *MaskProgram, args *Args, d Dims, maxBytes int64) (*DenseMask, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	f, err := bind(m.plan, "mask "+m.name, args)
	if err != nil {
		return nil, err
	}
	dm := &DenseMask{Dims: d, MaskBatch: 1, MaskHeads: 1}
	if m.plan.readsB {
		dm.MaskBatch = d.Batch
	}
	if m.plan.readsH {
		dm.MaskHeads = d.HeadsQ
	}
	size := int64(dm.MaskBatch) * int64(dm.MaskHeads) * int64(d.LenQ) * int64(d.LenKV)
	if maxBytes > 0 && size > maxBytes {
		return nil, fmt.Errorf("flex: dense mask %s for %d x %d x %d x %d pairs needs %d bytes, over the budget of %d",
			m.name, dm.MaskBatch, dm.MaskHeads, d.LenQ, d.LenKV, size, maxBytes)
	}
	dm.OK = make([]bool, size)
	rp := compileRows(m.plan, d.LenKV)
	planes := dm.MaskBatch * dm.MaskHeads
	workers := workerCount(planes * d.LenQ)
	evs := make([]*rowEval, workers)
	parallelFor(planes*d.LenQ, workers, func(w, r int) {
		if evs[w] == nil {
			evs[w] = rp.newEval(f)
		}
		bh, q := r/d.LenQ, r%d.LenQ
		evs[w].setBH(bh/dm.MaskHeads, bh%dm.MaskHeads)
		evs[w].setRow(q)
		evs[w].mask(0, d.LenKV, dm.OK[r*d.LenKV:(r+1)*d.LenKV])
	})
	return dm, nil
}

func (dm *DenseMask) plane(b, h int) []bool {
	if dm.MaskBatch == 1 {
		b = 0
	}
	if dm.MaskHeads == 1 {
		h = 0
	}
	n := dm.Dims.LenQ * dm.Dims.LenKV
	p := b*dm.MaskHeads + h
	return dm.OK[p*n : (p+1)*n]
}

// At reports whether (b, h, q, kv) is allowed.
func (dm *DenseMask) At(b, h, q, kv int) bool { return dm.plane(b, h)[q*dm.Dims.LenKV+kv] }

// Density returns the fraction of allowed pairs.
func (dm *DenseMask) Density() float64 {
	c := 0
	for _, v := range dm.OK {
		if v {
			c++
		}
	}
	return float64(c) / float64(len(dm.OK))
}

func (dm *DenseMask) tile(t *tileMask, b, h, q0, m, k0, n int) {
	t.fromDense(dm.plane(b, h), dm.Dims.LenKV, q0, m, k0, n)
}

func denseSource(d Dims, dm *DenseMask) *blockSource {
	return &blockSource{d: d, bq: DefaultBlock, bkv: DefaultBlock,
		nq: ceil.Div(d.LenQ, DefaultBlock), nkv: ceil.Div(d.LenKV, DefaultBlock), dense: dm}
}

func checkDense(d Dims, dm *DenseMask) { checkMask("dense mask", d, dm.Dims, dm.MaskHeads) }

// DenseForward is the dense reference of Forward: the same result, computing
// every score (in 128x128 tiles with the same kernels) and masking it with
// dm, as a masked attention without block sparsity does.
func DenseForward[T float32 | float64](d Dims, q, k, v []T, dm *DenseMask, score *ScoreProgram, args *Args, scale float64) (out, lse []T) {
	checkDense(d, dm)
	return forward(d, q, k, v, denseSource(d, dm), score, args, scale)
}
