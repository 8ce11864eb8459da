package tensor

import (
	"fmt"
	"slices"
)

// BackwardFrom seeds out's gradient with grad (out.Grad += grad), runs the
// recorded steps in reverse and resets the tape: the gradient of Σ grad⊙out.
func (tp *TapeOf[T]) BackwardFrom(out *Of[T], grad Storage[T]) {
	checkLen("BackwardFrom grad", grad.Len(), out.Store.Len())
	tp.addGrad(out, 1, grad)
	tp.runBackward(out)
}

// Embedding returns out[i,:] = w[ids[i],:], shape [ids.Len(), dim] for w of
// shape [vocab, dim]. Gradient: dw[ids[i],:] += dout[i,:].
func (tp *TapeOf[T]) Embedding(w *Of[T], ids Ints) *Of[T] {
	if len(w.Shape) != 2 {
		panic(fmt.Sprintf("tensor.Embedding: table %v is not 2-D", w))
	}
	dim := w.Shape[1]
	out := tp.alloc(w.Name+".lookup", ids.Len(), dim)
	tp.b.Gather(w.Store, dim, ids, out.Store)
	if tp.needs(w) {
		tp.Record(out, nil, func() { tp.b.ScatterAdd(out.GradStore, dim, ids, w.EnsureGrad()) })
	}
	return out
}

// Linear returns y = x·Wᵀ + b for x of shape [..., in], W of shape [out, in]
// (HF layout) and b of shape [out] or nil; y has shape [..., out].
// Gradients: dx += dy·W, dW += dyᵀ·x, db += Σ_rows dy.
func (tp *TapeOf[T]) Linear(x, w, b *Of[T]) *Of[T] { return tp.LinearAdd(x, w, b, nil, nil) }

// LinearAdd returns y = res + x·Wᵀ + b, Linear with a residual res of its
// output's shape (or nil) added by the product itself (Backend.GemmAdd: no
// add of its own, no product kept apart). y is into when into is not nil:
// a buffer of the caller's, as AddInto's y, or res itself on a tape that
// records nothing (the sum replaces res, which the caller reads no more).
// Gradients: Linear's, and dres += dy, handed on without a copy where it
// can be (the tape's passGrad).
func (tp *TapeOf[T]) LinearAdd(x, w, b, res, into *Of[T]) *Of[T] {
	if len(w.Shape) != 2 || x.Cols() != w.Shape[1] {
		panic(fmt.Sprintf("tensor.Linear: input %v does not match weight %v ([out, in])", x, w))
	}
	if b != nil && (b.Numel() != w.Shape[0]) {
		panic(fmt.Sprintf("tensor.Linear: bias %v does not match weight %v", b, w))
	}
	rows, in, outDim := x.Rows(), w.Shape[1], w.Shape[0]
	shape := append(slices.Clone(x.Shape[:len(x.Shape)-1]), outDim)
	y := tp.residualOut("LinearAdd", w.Name+".out", shape, res, into)
	if res != nil {
		tp.b.GemmAdd(false, true, rows, outDim, in, 1, x.Store, in, w.Store, in, res.Store, y.Store, outDim)
	} else {
		tp.b.Gemm(false, true, rows, outDim, in, 1, x.Store, in, w.Store, in, 0, y.Store, outDim)
	}
	if b != nil {
		tp.b.AddRows(y.Store, b.Store)
	}
	if tp.needs(x, w, b, res) {
		var saves []*Of[T] // dx reads W, dW reads x
		if x.RequiresGrad {
			saves = append(saves, w)
		}
		if w.RequiresGrad {
			saves = append(saves, x)
		}
		tp.Record(y, saves, func() {
			if x.RequiresGrad {
				dx, acc := tp.GradDst(x)
				tp.b.Gemm(false, false, rows, in, outDim, 1, y.GradStore, outDim, w.Store, in, beta[T](acc), dx, in)
			}
			if w.RequiresGrad {
				dw, acc := tp.GradDst(w)
				tp.b.Gemm(true, false, outDim, in, rows, 1, y.GradStore, outDim, x.Store, in, beta[T](acc), dw, in)
			}
			if b != nil && b.RequiresGrad {
				tp.b.SumRows(y.GradStore, b.EnsureGrad())
			}
			if res != nil && res.RequiresGrad {
				tp.passGrad(y, res)
			}
		})
	}
	return y
}

// residualOut returns the output of an op that adds res (nil: none) to a
// result of the given shape: into when not nil, else a new tensor. It
// panics when res or into does not have that shape, or when into is res
// on a tape that records (res's values may be read by a backward step).
func (tp *TapeOf[T]) residualOut(op, name string, shape []int, res, into *Of[T]) *Of[T] {
	if res != nil && !slices.Equal(res.Shape, shape) {
		panic(fmt.Sprintf("tensor.%s: residual %v is not of the output's shape %v", op, res, shape))
	}
	if into == nil {
		return tp.alloc(name, shape...)
	}
	if !slices.Equal(into.Shape, shape) {
		panic(fmt.Sprintf("tensor.%s: output %v is not of shape %v", op, into, shape))
	}
	if into == res && tp.record {
		panic(fmt.Sprintf("tensor.%s: in place into the residual %v on a tape that records", op, res))
	}
	return into
}

// Add returns a + b (same shape). Gradients: da += dy, db += dy.
func (tp *TapeOf[T]) Add(a, b *Of[T]) *Of[T] {
	return tp.AddInto(a, b, tp.alloc(a.Name+"+", a.Shape...))
}

// AddInto is Add writing into y (of a's shape, neither a nor b) instead of
// an output of its own, and returns y: a forward pass that keeps a result
// in a buffer of its own writes it there without a copy. y is the
// caller's: the tape never gives it back (ReleaseGrads).
func (tp *TapeOf[T]) AddInto(a, b, y *Of[T]) *Of[T] {
	if !slices.Equal(a.Shape, b.Shape) || !slices.Equal(a.Shape, y.Shape) {
		panic(fmt.Sprintf("tensor.Add: shapes differ: %v, %v and %v", a, b, y))
	}
	tp.b.Add(a.Store, b.Store, y.Store)
	if tp.needs(a, b) {
		tp.Record(y, nil, func() {
			if b.RequiresGrad {
				tp.addGrad(b, 1, y.GradStore)
			}
			if a.RequiresGrad {
				tp.passGrad(y, a) // last: it may take y's gradient
			}
		})
	}
	return y
}

// Scale returns s·x. Gradient: dx += s·dy.
func (tp *TapeOf[T]) Scale(x *Of[T], s float64) *Of[T] {
	y := tp.alloc(x.Name+"*", x.Shape...)
	n := y.Numel()
	tp.b.Copy2D(1, n, x.Store, n, 0, y.Store, n, 0, false)
	tp.b.Scale(T(s), y.Store)
	if tp.needs(x) {
		tp.Record(y, nil, func() { tp.addGrad(x, T(s), y.GradStore) })
	}
	return y
}

// Reshape returns a view of x with another shape of the same size; the
// values are shared, the gradient is passed back unchanged.
func (tp *TapeOf[T]) Reshape(x *Of[T], shape ...int) *Of[T] {
	if numel(shape) != x.Numel() {
		panic(fmt.Sprintf("tensor.Reshape: %v cannot become %v", x, shape))
	}
	y := &Of[T]{Name: x.Name, Shape: slices.Clone(shape), Store: x.Store, buf: x.buf}
	if x.buf != nil {
		x.buf.views = append(x.buf.views, y)
	}
	if tp.needs(x) {
		tp.Record(y, nil, func() { tp.passGrad(y, x) })
	}
	return y
}

// Concat joins xs along axis; all other dimensions must agree.
// Gradient: each input receives its slice of dy.
func (tp *TapeOf[T]) Concat(axis int, xs ...*Of[T]) *Of[T] {
	if len(xs) == 0 {
		panic("tensor.Concat: no inputs")
	}
	first := xs[0]
	if axis < 0 {
		axis += len(first.Shape)
	}
	outer := numel(first.Shape[:axis])
	shape := slices.Clone(first.Shape)
	shape[axis] = 0
	inner := make([]int, len(xs))
	for i, x := range xs {
		if len(x.Shape) != len(first.Shape) || numel(x.Shape[:axis]) != outer || !slices.Equal(x.Shape[axis+1:], first.Shape[axis+1:]) {
			panic(fmt.Sprintf("tensor.Concat: %v does not match %v on axis %d", x, first, axis))
		}
		shape[axis] += x.Shape[axis]
		inner[i] = numel(x.Shape[axis:])
	}
	total := numel(shape[axis:])
	y := tp.alloc("concat", shape...)
	off := 0
	for i, x := range xs {
		tp.b.Copy2D(outer, inner[i], x.Store, inner[i], 0, y.Store, total, off, false)
		off += inner[i]
	}
	if tp.needs(xs...) {
		tp.Record(y, nil, func() {
			off := 0
			for i, x := range xs {
				if x.RequiresGrad {
					dx, acc := tp.GradDst(x)
					tp.b.Copy2D(outer, inner[i], y.GradStore, total, off, dx, inner[i], 0, acc)
				}
				off += inner[i]
			}
		})
	}
	return y
}

// Slice returns x restricted to [lo, hi) along axis (a copy).
// Gradient: dx[.., lo:hi, ..] += dy.
func (tp *TapeOf[T]) Slice(x *Of[T], axis, lo, hi int) *Of[T] {
	if axis < 0 {
		axis += len(x.Shape)
	}
	if lo < 0 || hi > x.Shape[axis] || lo > hi {
		panic(fmt.Sprintf("tensor.Slice: [%d,%d) out of range for axis %d of %v", lo, hi, axis, x))
	}
	outer := numel(x.Shape[:axis])
	per := numel(x.Shape[axis+1:])
	shape := slices.Clone(x.Shape)
	shape[axis] = hi - lo
	y := tp.alloc(x.Name+".slice", shape...)
	srcStride, cols := x.Shape[axis]*per, (hi-lo)*per
	tp.b.Copy2D(outer, cols, x.Store, srcStride, lo*per, y.Store, cols, 0, false)
	if tp.needs(x) {
		tp.Record(y, nil, func() {
			dx, acc := tp.GradDst(x)
			if !acc && cols != srcStride {
				tp.b.Fill(dx, 0) // the rest of the axis receives no gradient
				acc = true
			}
			tp.b.Copy2D(outer, cols, y.GradStore, cols, 0, dx, srcStride, lo*per, acc)
		})
	}
	return y
}

// Transpose12 permutes a 4-D tensor [A, B, C, D] to [A, C, B, D], e.g.
// [batch, len, heads, headDim] to flex's [batch, heads, len, headDim].
// Gradient: the inverse permutation of dy.
func (tp *TapeOf[T]) Transpose12(x *Of[T]) *Of[T] {
	if len(x.Shape) != 4 {
		panic(fmt.Sprintf("tensor.Transpose12: %v is not 4-D", x))
	}
	a, b, c, d := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	y := tp.alloc(x.Name+".T", a, c, b, d)
	tp.b.Transpose12(a, b, c, d, x.Store, y.Store, false)
	if tp.needs(x) {
		tp.Record(y, nil, func() {
			dx, acc := tp.GradDst(x)
			tp.b.Transpose12(a, c, b, d, y.GradStore, dx, acc)
		})
	}
	return y
}

// RMSNorm normalises each row of x over its last dimension:
// y = x / sqrt(mean(x²) + eps) · w, with w of that dimension's size.
// Gradients (x̂ = x·rstd, g = dy⊙w): dx = rstd·(g − x̂·mean(g⊙x̂)), dw = Σ_rows dy⊙x̂.
// Applied to [tokens, heads, headDim] with w of size headDim it is QK-norm.
func (tp *TapeOf[T]) RMSNorm(x, w *Of[T], eps float64) *Of[T] { return tp.rmsNorm(x, w, eps, nil) }

// RMSNormFor is RMSNorm whose result only products with next read, as
// their A operand (x·nextᵀ, next a weight or a Span of weights with rows of
// x's last dimension). Without gradients to record for x or w it is written
// into the storage the backend gives such operands (OperandAlloc: with
// next held in FP8, quantized by the norm itself, saving the product's
// pass over it); else, or on a backend without OperandAlloc, it is RMSNorm.
func (tp *TapeOf[T]) RMSNormFor(x, w *Of[T], eps float64, next *Of[T]) *Of[T] {
	if tp.needs(x, w) {
		return tp.RMSNorm(x, w, eps)
	}
	return tp.rmsNorm(x, w, eps, tp.allocOperand(x.Rows(), x.Cols(), next))
}

// rmsNorm is RMSNorm into y's storage ys (nil: a new one).
func (tp *TapeOf[T]) rmsNorm(x, w *Of[T], eps float64, ys Storage[T]) *Of[T] {
	dim := x.Cols()
	if w.Numel() != dim {
		panic(fmt.Sprintf("tensor.RMSNorm: weight %v does not match last dimension of %v", w, x))
	}
	if ys == nil {
		ys = tp.b.AllocOut(x.Numel())
	}
	y := tp.own(&Of[T]{Name: w.Name + ".out", Shape: slices.Clone(x.Shape), Store: ys})
	rstd := tp.stat(w.Name+".rstd", x.Rows())
	tp.b.RMSNorm(x.Store, w.Store, dim, eps, y.Store, rstd.Store)
	tp.recomputable(y, []*Of[T]{x, w, rstd}, func(s Storage[T]) {
		tp.b.RMSNorm(x.Store, w.Store, dim, eps, s, rstd.Store) // rstd gets the values it holds
	})
	if tp.needs(x, w) {
		tp.Record(y, []*Of[T]{x, w, rstd}, func() {
			var dx, dw Storage[T]
			acc := true
			if x.RequiresGrad {
				dx, acc = tp.GradDst(x)
			}
			if w.RequiresGrad {
				dw = w.EnsureGrad() // the backend adds dw whatever acc says
			}
			tp.b.RMSNormBackward(x.Store, w.Store, rstd.Store, y.GradStore, dim, dx, dw, acc)
		})
	}
	return y
}

// SwiGLU returns silu(gate)⊙up with silu(g) = g·σ(g).
// Gradients: dgate = dy⊙up⊙σ(g)(1 + g(1−σ(g))), dup = dy⊙silu(g).
func (tp *TapeOf[T]) SwiGLU(gate, up *Of[T]) *Of[T] {
	if !slices.Equal(gate.Shape, up.Shape) {
		panic(fmt.Sprintf("tensor.SwiGLU: shapes differ: %v and %v", gate, up))
	}
	y := tp.alloc("swiglu", gate.Shape...)
	tp.b.SwiGLU(gate.Store, up.Store, y.Store)
	if tp.needs(gate, up) {
		tp.Record(y, []*Of[T]{gate, up}, func() {
			var ts [2]*Of[T]
			if gate.RequiresGrad {
				ts[0] = gate
			}
			if up.RequiresGrad {
				ts[1] = up
			}
			g, acc := tp.gradDsts(ts[:]...)
			tp.b.SwiGLUBackward(gate.Store, up.Store, y.GradStore, g[0], g[1], acc)
		})
	}
	return y
}
