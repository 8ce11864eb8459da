package tensor

import (
	"fmt"
	"slices"
)

// SwiGLUPacked returns silu(y2[:, :I])⊙y2[:, I:] for y2 of shape [..., 2I]
// (gate and up side by side, as a Linear of Span(gate, up) makes them), of
// shape [..., I]. Gradients: SwiGLU's, dgate into the first I columns of
// dy2 and dup into the last.
func (tp *TapeOf[T]) SwiGLUPacked(y2 *Of[T]) *Of[T] {
	inter := packedHalf("SwiGLUPacked", y2)
	shape := append(slices.Clone(y2.Shape[:len(y2.Shape)-1]), inter)
	y := tp.alloc("swiglu", shape...)
	tp.b.SwiGLUPacked(y2.Store, inter, y.Store)
	if tp.needs(y2) {
		tp.Record(y, []*Of[T]{y2}, func() {
			dy2, acc := tp.GradDst(y2)
			tp.b.SwiGLUPackedBackward(y2.Store, y.GradStore, inter, dy2, acc)
		})
	}
	return y
}

// MLP returns the SwiGLU MLP res + act·Downᵀ with act = SwiGLUPacked(x·W2ᵀ),
// for x [..., H], W2 [2I, H] (gate's rows then up's: Span(gate, up)), Down
// [H', I] and a residual res of the result's shape [..., H'] or nil, added
// by the last product itself (LinearAdd's res; into is LinearAdd's). It is
// Linear(SwiGLUPacked(Linear(x, W2)), Down) but keeps only x and the
// product y2 = x·W2ᵀ for its backward step, which recomputes act (one
// elementwise pass) instead of keeping it. Gradients, with
// dact = dy·Down and dy2 = SwiGLUPacked's gradient for dact:
// dDown += dyᵀ·act, dx += dy2·W2, dW2 += dy2ᵀ·x, dres += dy.
func (tp *TapeOf[T]) MLP(x, w2, down, res, into *Of[T]) *Of[T] {
	if len(w2.Shape) != 2 || x.Cols() != w2.Shape[1] || len(down.Shape) != 2 || 2*down.Shape[1] != w2.Shape[0] {
		panic(fmt.Sprintf("tensor.MLP: input %v, gate and up %v ([2I, H]) and down %v ([H', I]) do not match", x, w2, down))
	}
	rows, in, inter, outDim := x.Rows(), w2.Shape[1], down.Shape[1], down.Shape[0]
	y2 := tp.alloc(w2.Name+".out", rows, 2*inter)
	tp.b.Gemm(false, true, rows, 2*inter, in, 1, x.Store, in, w2.Store, in, 0, y2.Store, 2*inter)
	act := tp.allocOperand(rows, inter, down) // read by the down product alone: backward recomputes it
	tp.b.SwiGLUPacked(y2.Store, inter, act)
	y := tp.residualOut("MLP", down.Name+".out", append(slices.Clone(x.Shape[:len(x.Shape)-1]), outDim), res, into)
	if res != nil {
		tp.b.GemmAdd(false, true, rows, outDim, inter, 1, act, inter, down.Store, inter, res.Store, y.Store, outDim)
	} else {
		tp.b.Gemm(false, true, rows, outDim, inter, 1, act, inter, down.Store, inter, 0, y.Store, outDim)
	}
	tp.releaseTemp(act)
	if !tp.needs(x, w2, down, res) {
		return y
	}
	saves := []*Of[T]{y2, w2, down}
	if w2.RequiresGrad {
		saves = append(saves, x)
	}
	back := func() {
		dy := y.GradStore
		if down.RequiresGrad {
			act := y2.Store.LikeOut(rows * inter)
			tp.b.SwiGLUPacked(y2.Store, inter, act)
			dd, acc := tp.GradDst(down)
			tp.b.Gemm(true, false, outDim, inter, rows, 1, dy, outDim, act, inter, beta[T](acc), dd, inter)
			tp.releaseTemp(act)
		}
		if !x.RequiresGrad && !w2.RequiresGrad {
			return
		}
		dact := y2.Store.LikeOut(rows * inter)
		tp.b.Gemm(false, false, rows, inter, outDim, 1, dy, outDim, down.Store, inter, 0, dact, inter)
		dy2 := y2.Store // y2 is read for the last time here: its gradient overwrites it
		tp.b.SwiGLUPackedBackward(y2.Store, dact, inter, dy2, false)
		tp.releaseTemp(dact)
		if x.RequiresGrad {
			dx, acc := tp.GradDst(x)
			tp.b.Gemm(false, false, rows, in, 2*inter, 1, dy2, 2*inter, w2.Store, in, beta[T](acc), dx, in)
		}
		if w2.RequiresGrad {
			dw, acc := tp.GradDst(w2)
			tp.b.Gemm(true, false, 2*inter, in, rows, 1, dy2, 2*inter, x.Store, in, beta[T](acc), dw, in)
		}
	}
	tp.Record(y, saves, func() {
		back()
		if res != nil && res.RequiresGrad {
			tp.passGrad(y, res) // last: it may take y's gradient
		}
	})
	return y
}

// packedHalf returns I for a packed product of shape [..., 2I]; it panics
// for an odd last dimension.
func packedHalf[T Float](op string, y2 *Of[T]) int {
	if len(y2.Shape) == 0 || y2.Cols()%2 != 0 {
		panic(fmt.Sprintf("tensor.%s: %v does not end in an even dimension (gate and up side by side)", op, y2))
	}
	return y2.Cols() / 2
}
