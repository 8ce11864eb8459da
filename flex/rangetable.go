package flex

import "math"

// rangeTable answers min/max queries over boxes of a tensor: one segment tree
// over the last dimension per leading index (O(size) memory, O(log n) per
// query), plus the global extremes as a fallback for boxes with many leading
// indices.
type rangeTable struct {
	shape      []int
	last       int       // size of the last dimension
	mn, mx     []float64 // per leading index: 2*last tree nodes, leaves at [last, 2*last)
	gmin, gmax float64
	nan        bool // the tensor holds a NaN somewhere
}

// maxBoxRows bounds the leading-index combinations a box query visits before
// it answers with the global extremes instead.
const maxBoxRows = 4096

func newRangeTable(t *boundTensor) *rangeTable {
	n := 1
	for _, s := range t.shape {
		n *= s
	}
	last := t.shape[len(t.shape)-1]
	rt := &rangeTable{shape: t.shape, last: last,
		mn: make([]float64, 2*n), mx: make([]float64, 2*n),
		gmin: math.Inf(1), gmax: math.Inf(-1)}
	val := func(i int) float64 {
		if t.idata != nil {
			return float64(t.idata[i])
		}
		return t.fdata[i]
	}
	for r := 0; r < n/last; r++ {
		mn, mx := rt.mn[2*r*last:2*(r+1)*last], rt.mx[2*r*last:2*(r+1)*last]
		for i := 0; i < last; i++ {
			v := val(r*last + i)
			if v != v {
				rt.nan = true
				mn[last+i], mx[last+i] = math.Inf(1), math.Inf(-1)
				continue
			}
			mn[last+i], mx[last+i] = v, v
			rt.gmin, rt.gmax = math.Min(rt.gmin, v), math.Max(rt.gmax, v)
		}
		for i := last - 1; i >= 1; i-- {
			mn[i] = math.Min(mn[2*i], mn[2*i+1])
			mx[i] = math.Max(mx[2*i], mx[2*i+1])
		}
	}
	return rt
}

// box returns the minimum and maximum over the index box [lo[d], hi[d]]
// (inclusive, already clamped) and whether a NaN may be read; idx is
// scratch space, returned for reuse.
func (rt *rangeTable) box(lo, hi, idx []int) (mn, mx float64, nan bool, scratch []int) {
	rows := 1
	for d := 0; d < len(lo)-1; d++ {
		rows *= hi[d] - lo[d] + 1
	}
	if rows > maxBoxRows {
		return rt.gmin, rt.gmax, rt.nan, idx
	}
	mn, mx = math.Inf(1), math.Inf(-1)
	r := len(lo) - 1
	idx = append(idx[:0], lo[:r]...)
	for {
		row := 0
		for d, x := range idx {
			row = row*rt.shape[d] + x
		}
		a, b := rt.query(row, lo[r], hi[r]+1)
		mn, mx = math.Min(mn, a), math.Max(mx, b)
		// advance the leading index odometer
		d := r - 1
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] <= hi[d] {
				break
			}
			idx[d] = lo[d]
		}
		if d < 0 {
			break
		}
	}
	if mn > mx { // only NaNs in the box
		return math.Inf(-1), math.Inf(1), true, idx
	}
	return mn, mx, rt.nan, idx
}

// query returns the extremes of row over [l, r).
func (rt *rangeTable) query(row, l, r int) (float64, float64) {
	n := rt.last
	mn, mx := rt.mn[2*row*n:2*(row+1)*n], rt.mx[2*row*n:2*(row+1)*n]
	a, b := math.Inf(1), math.Inf(-1)
	for l, r = l+n, r+n; l < r; l, r = l/2, r/2 {
		if l&1 == 1 {
			a, b = math.Min(a, mn[l]), math.Max(b, mx[l])
			l++
		}
		if r&1 == 1 {
			r--
			a, b = math.Min(a, mn[r]), math.Max(b, mx[r])
		}
	}
	return a, b
}

// buildRangeTables builds the range tables of the tensors p reads.
func buildRangeTables(p *plan, f *frame) {
	for i, prm := range p.params {
		if prm.Kind == ParamIntTensor || prm.Kind == ParamFloatTensor {
			f.tensors[i].rmq = newRangeTable(f.tensors[i])
		}
	}
}
