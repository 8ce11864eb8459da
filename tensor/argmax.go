package tensor

import "fmt"

// Argmax returns the index of the largest element of x (len(x) ≥ 1), the
// lowest index among equal maxima. A NaN counts as larger than every number,
// so the first NaN of x wins (NumPy's argmax); −0 and +0 are equal. It is
// greedy decoding's choice of a token from logits, and the rule that
// Backend.ArgmaxRows applies to each row on every backend.
func Argmax[T Float](x []T) int {
	if len(x) == 0 {
		panic("tensor.Argmax: no elements")
	}
	best := 0
	for i := 1; i < len(x); i++ {
		if v, m := x[i], x[best]; v > m || v != v && m == m {
			best = i
		}
	}
	return best
}

// RowArgmax returns Argmax of each row of t (its last dimension; t holds
// Numel/cols rows) in host memory: the backend computes them
// (Backend.ArgmaxRows) and only the row count of int32 ids is downloaded,
// not the values. It waits for the queued work on a device, as Values does.
func RowArgmax[T Float](b Backend[T], t *Of[T]) []int32 {
	if len(t.Shape) == 0 || t.Shape[len(t.Shape)-1] == 0 {
		panic(fmt.Sprintf("tensor.RowArgmax: %v has no columns", t))
	}
	cols := t.Shape[len(t.Shape)-1]
	rows := t.Numel() / cols
	ids := b.AllocInts(rows)
	b.ArgmaxRows(t.Store, rows, cols, ids)
	out := make([]int32, rows)
	b.DownloadInts(ids, out)
	return out
}

// ArgmaxRows writes out[r] = Argmax(row r) for each row of x as rows×cols.
func (c *CPU[T]) ArgmaxRows(xS Storage[T], rows, cols int, outS Ints) {
	x := HostData(xS, "ArgmaxRows x")
	out := HostIntData(outS, "ArgmaxRows out")
	if cols <= 0 {
		panic(fmt.Sprintf("tensor: ArgmaxRows: %d columns", cols))
	}
	checkLen("ArgmaxRows x", len(x), rows*cols)
	checkLen("ArgmaxRows out", len(out), rows)
	c.parallel(rows, 1+(1<<14)/cols, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			out[r] = int32(Argmax(x[r*cols : (r+1)*cols]))
		}
	})
}
