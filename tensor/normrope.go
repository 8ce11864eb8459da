package tensor

import "fmt"

// NormRoPEHeads returns attention's input [B, H, L, D] for x [B, L, H, D]
// (a query or key projection) in one op: each head RMS-normed over D with
// weight w (QK-norm; w nil: no norm, as in Llama), rotated by the angles
// of its row b·L + l of table (RoPE) and moved to the head-major layout:
// y[b,h,l,:] = RoPE(x[b,l,h,:]·rstd·w), the values of
// Transpose12(RoPE(RMSNorm(x, w, eps), table)).
// Gradients: with g = RoPE⁻¹(dy[b,h,l,:]) and x̂ = x[b,l,h,:]·rstd,
// dx = rstd·(g⊙w − x̂·mean(g⊙w⊙x̂)) and dw = Σ g⊙x̂; without w, dx = g.
func (tp *TapeOf[T]) NormRoPEHeads(x, w *Of[T], eps float64, table *RopeTable[T]) *Of[T] {
	if len(x.Shape) != 4 {
		panic(fmt.Sprintf("tensor.NormRoPEHeads: %v is not 4-D [batch, len, heads, headDim]", x))
	}
	b, l, h, d := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	if table.Rows() != b*l {
		panic(fmt.Sprintf("tensor.NormRoPEHeads: %v needs %d rotary rows, the table has %d", x, b*l, table.Rows()))
	}
	return tp.normRoPE(rowsOf(x, h*d), w, eps, table, b, l, h, d, b, h, l, d)
}

// NormRoPEHeadsCols is NormRoPEHeads of x [batch, rows/batch, heads,
// headDim] read in place from the block c of rows·(heads·headDim) values
// (a projection of Projections): y [batch, heads, rows/batch, headDim].
func (tp *TapeOf[T]) NormRoPEHeadsCols(c *Cols[T], batch int, w *Of[T], eps float64, table *RopeTable[T]) *Of[T] {
	rows, d := c.Rows(), table.HeadDim
	if batch <= 0 || rows%batch != 0 || table.Rows() != rows || c.width%d != 0 {
		panic(fmt.Sprintf("tensor.NormRoPEHeadsCols: %v is not %d batches of %d rotary rows of heads×%d", c, batch, table.Rows(), d))
	}
	l, h := rows/batch, c.width/d
	return tp.normRoPE(c, w, eps, table, batch, l, h, d, batch, h, l, d)
}

// NormRoPE is NormRoPEHeads without the move: x holds table.Rows() rows
// of heads×headDim values (any shape with that size) and y has x's shape:
// y = RoPE(RMSNorm(x, w, eps), table) for w of size headDim (nil: RoPE only).
func (tp *TapeOf[T]) NormRoPE(x, w *Of[T], eps float64, table *RopeTable[T]) *Of[T] {
	rows, hd := table.Rows(), table.HeadDim
	if rows == 0 || x.Numel()%(rows*hd) != 0 {
		panic(fmt.Sprintf("tensor.NormRoPE: %v is not %d rows of heads×%d", x, rows, hd))
	}
	n := x.Numel() / rows
	return tp.normRoPE(rowsOf(x, n), w, eps, table, rows, 1, n/hd, hd, x.Shape...)
}

// NormRoPECols is NormRoPE of the block c (a projection of Projections),
// read in place: y [c.Rows(), c.Width()].
func (tp *TapeOf[T]) NormRoPECols(c *Cols[T], w *Of[T], eps float64, table *RopeTable[T]) *Of[T] {
	rows, hd := c.Rows(), table.HeadDim
	if table.Rows() != rows || c.width%hd != 0 {
		panic(fmt.Sprintf("tensor.NormRoPECols: %v is not %d rows of heads×%d", c, table.Rows(), hd))
	}
	return tp.normRoPE(c, w, eps, table, rows, 1, c.width/hd, hd, rows, c.width)
}

// normRoPE records the backend's NormRoPE of x, read from its block c
// as [batch, length, heads, headDim], with output shape shape.
func (tp *TapeOf[T]) normRoPE(c *Cols[T], w *Of[T], eps float64, table *RopeTable[T], batch, length, heads, headDim int, shape ...int) *Of[T] {
	x := c.t
	if table.HeadDim != headDim {
		panic(fmt.Sprintf("tensor.NormRoPE: %v has head dimension %d, the rotary table %d", c, headDim, table.HeadDim))
	}
	y := tp.alloc(x.Name+".rope", shape...)
	var rstd *Of[T]
	var saves []*Of[T] // without w the backward step reads dy only
	var wS, rstdS Storage[T]
	if w != nil {
		if w.Numel() != headDim {
			panic(fmt.Sprintf("tensor.NormRoPE: weight %v does not match head dimension %d of %v", w, headDim, c))
		}
		rstd = tp.stat(w.Name+".rstd", batch*length*heads)
		wS, rstdS, saves = w.Store, rstd.Store, []*Of[T]{x, w, rstd}
	}
	tp.b.NormRoPE(c.view(x.Store), wS, batch, length, heads, headDim, c.stride, eps, table.Cos, table.Sin, y.Store, rstdS)
	if tp.needs(x, w) {
		tp.Record(y, saves, func() {
			var xS, dx, dw Storage[T]
			acc := true
			if x.RequiresGrad {
				dx, acc = tp.colsGradDst(c)
				dx = c.view(dx)
			}
			if w != nil {
				xS = c.view(x.Store)
				if w.RequiresGrad {
					dw = w.EnsureGrad() // the backend adds dw whatever acc says
				}
			}
			tp.b.NormRoPEBackward(xS, wS, rstdS, y.GradStore, batch, length, heads, headDim, c.stride, table.Cos, table.Sin, dx, dw, acc)
		})
	}
	return y
}
