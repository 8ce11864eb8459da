package tensor

import (
	"fmt"
	"slices"
)

// Cols is a block of columns [off, off+width) of a tensor t viewed as rows
// of stride values (t's last dimension): column block j of a product that
// Projections made, whose rows lie the product's width apart, or the whole
// of a dense tensor (ColsOf). It is not an *Of, so that only the ops that
// read rows with a stride take it (NormRoPEHeadsCols, NormRoPECols,
// ConcatCols, Data); their backward steps write its gradient, the same
// block of t's gradient, in place.
type Cols[T Float] struct {
	t                  *Of[T]
	off, width, stride int
	block              bool // one block of a Projections product: its gradient is tracked per block
	wrote              bool // with block: a backward step has written this block of t's gradient
}

// ColsOf returns the whole of t [..., n] as rows of n columns.
func ColsOf[T Float](t *Of[T]) *Cols[T] { return rowsOf(t, t.Cols()) }

// rowsOf returns the whole of t as rows of n columns, whatever its shape.
func rowsOf[T Float](t *Of[T], n int) *Cols[T] { return &Cols[T]{t: t, width: n, stride: n} }

// Rows returns the number of rows.
func (c *Cols[T]) Rows() int { return c.t.Numel() / c.stride }

// Width returns the number of columns.
func (c *Cols[T]) Width() int { return c.width }

// String names the block: its tensor and its columns.
func (c *Cols[T]) String() string {
	return fmt.Sprintf("%v[:, %d:%d]", c.t, c.off, c.off+c.width)
}

// Data returns a dense copy [Rows, Width] of the block's values in host
// memory; it panics for a tensor on a device.
func (c *Cols[T]) Data() []T {
	x, out := c.t.Data(), make([]T, 0, c.Rows()*c.width)
	for r := range c.Rows() {
		out = append(out, x[r*c.stride+c.off:][:c.width]...)
	}
	return out
}

// view returns the range of s (t's values or gradient) that the block's
// rows span, from its first element.
func (c *Cols[T]) view(s Storage[T]) Storage[T] {
	return s.Slice(c.off, c.off+StridedLen(c.Rows(), c.width, c.stride))
}

// colsGradDst returns the storage of the gradient of c's tensor t (all of
// it: c's block is at c.off, rows c.stride apart) and whether a backward
// step must add to c's block: as GradDst(t) for a whole tensor; for a block
// of a product, false for the first step to reach the block (it must write
// every element of it) and true for any later one.
func (tp *TapeOf[T]) colsGradDst(c *Cols[T]) (Storage[T], bool) {
	s, acc := tp.GradDst(c.t)
	if c.block {
		acc, c.wrote = c.wrote, true
	}
	return s, acc
}

// Projections returns the column blocks of widths (summing to w's rows) of
// the product y = x·Wᵀ, Linear(x, w, nil), for x [..., in] and w [Σ widths,
// in] (a Span of parameters, e.g. Span(Q, K, V)): one GEMM for several
// projections of one input, whose results the consumers read in place.
// Gradients: Linear's, with dy the blocks' gradients side by side (a block
// whose consumers gave it none counts as zero).
func (tp *TapeOf[T]) Projections(x, w *Of[T], widths ...int) []*Cols[T] {
	if len(w.Shape) != 2 || slices.ContainsFunc(widths, func(n int) bool { return n <= 0 }) || sum(widths) != w.Shape[0] {
		panic(fmt.Sprintf("tensor.Projections: widths %v do not split weight %v ([out, in]) into blocks", widths, w))
	}
	y, n := tp.Linear(x, w, nil), w.Shape[0]
	cols := make([]*Cols[T], len(widths))
	off := 0
	for i, wd := range widths {
		cols[i] = &Cols[T]{t: y, off: off, width: wd, stride: n, block: true}
		off += wd
	}
	if tp.needs(y) {
		// Runs after every consumer's step and before the product's: a
		// block no step wrote is zeroed.
		tp.Record(y, nil, func() {
			for _, c := range cols {
				if !c.wrote {
					tp.zeroCols(c)
				}
			}
		})
	}
	return cols
}

// zeroCols writes zeros into c's block of its tensor's gradient.
func (tp *TapeOf[T]) zeroCols(c *Cols[T]) {
	dst, _ := tp.colsGradDst(c)
	rows := c.Rows()
	z := tp.b.AllocOut(rows * c.width)
	tp.b.Fill(z, 0)
	tp.b.Copy2D(rows, c.width, z, c.width, 0, dst, c.stride, c.off, false)
	tp.releaseTemp(z)
}

// ConcatCols joins blocks cs of one width, each [batch, rows_i/batch,
// width], along their second dimension: y [batch, Σ rows_i/batch, width],
// y[b] = [cs[0][b] ; cs[1][b] ; …] (Concat(1, …) of the blocks, read in
// place). Gradient: each block receives its rows of dy.
func (tp *TapeOf[T]) ConcatCols(batch int, cs ...*Cols[T]) *Of[T] {
	if len(cs) == 0 || batch <= 0 {
		panic(fmt.Sprintf("tensor.ConcatCols: %d blocks in %d batches", len(cs), batch))
	}
	width, total := cs[0].width, 0
	per := make([]int, len(cs))
	for i, c := range cs {
		if c.width != width || c.Rows()%batch != 0 {
			panic(fmt.Sprintf("tensor.ConcatCols: %v is not of %v's width or not %d batches of rows", c, cs[0], batch))
		}
		per[i] = c.Rows() / batch
		total += per[i]
	}
	y := tp.alloc("concat", batch, total, width)
	// each calls f for batch b's rows of block i, which start at row r of y.
	each := func(f func(i, b, r int)) {
		for b := range batch {
			r := b * total
			for i := range cs {
				f(i, b, r)
				r += per[i]
			}
		}
	}
	// Copy2D's offsets stay within a row: the storages start at the rows.
	from := func(s Storage[T], at int) Storage[T] { return s.Slice(at, s.Len()) }
	each(func(i, b, r int) {
		c := cs[i]
		tp.b.Copy2D(per[i], width, from(c.t.Store, b*per[i]*c.stride), c.stride, c.off, from(y.Store, r*width), width, 0, false)
	})
	parents := make([]*Of[T], len(cs))
	for i, c := range cs {
		parents[i] = c.t
	}
	if tp.needs(parents...) {
		tp.Record(y, nil, func() {
			dsts, accs := make([]Storage[T], len(cs)), make([]bool, len(cs))
			for i, c := range cs {
				if c.t.RequiresGrad {
					dsts[i], accs[i] = tp.colsGradDst(c)
				}
			}
			each(func(i, b, r int) {
				if c := cs[i]; dsts[i] != nil {
					tp.b.Copy2D(per[i], width, from(y.GradStore, r*width), width, 0, from(dsts[i], b*per[i]*c.stride), c.stride, c.off, accs[i])
				}
			})
		})
	}
	return y
}

// sum returns the sum of ns.
func sum(ns []int) int {
	s := 0
	for _, n := range ns {
		s += n
	}
	return s
}
