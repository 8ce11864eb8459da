package tensor

import (
	"fmt"
	"math"
)

// normRoPEDims checks NormRoPE's sizes and returns the host views of a
// (y forward, dy backward), cos and sin and the number of head rows
// (batch·length·heads).
func normRoPEDims[T Float](op string, aS, cosS, sinS Storage[T], batch, length, heads, headDim, xStride int) (a, cos, sin []T, rows int) {
	if headDim <= 0 || headDim%2 != 0 {
		panic(fmt.Sprintf("tensor: %s: head dimension %d is not positive and even", op, headDim))
	}
	if xStride < heads*headDim {
		panic(fmt.Sprintf("tensor: %s: row stride %d is less than heads×headDim %d×%d", op, xStride, heads, headDim))
	}
	a, cos, sin = HostData(aS, op+" values"), HostData(cosS, op+" cos"), HostData(sinS, op+" sin")
	rows = batch * length * heads
	checkLen(op+" values", len(a), rows*headDim)
	checkLen(op+" cos", len(cos), batch*length*headDim/2)
	checkLen(op+" sin", len(sin), batch*length*headDim/2)
	return a, cos, sin, rows
}

// headRows maps head row i = (b·length + l)·heads + h of x to its rotary
// row r = b·length + l and to its offset in the [batch, heads, length, D]
// layout, ((b·heads + h)·length + l)·D.
func headRows(i, length, heads, headDim int) (r, out int) {
	r, h := i/heads, i%heads
	b, l := r/length, r%length
	return r, ((b*heads+h)*length + l) * headDim
}

// StridedLen returns the elements that rows rows of width values, stride
// apart, span (0 for no rows): the length of a strided x or dx of
// NormRoPE (Backend).
func StridedLen(rows, width, stride int) int {
	if rows == 0 {
		return 0
	}
	return (rows-1)*stride + width
}

// headAt returns the offset of head row i (of heads×headDim a row) in x
// with rows xStride apart.
func headAt(i, heads, headDim, xStride int) int { return i/heads*xStride + i%heads*headDim }

// NormRoPE computes RMSNorm over each head (when w is given), RoPE, and the
// move to [batch, heads, length, headDim], per head row in float64.
func (c *CPU[T]) NormRoPE(xS, wS Storage[T], batch, length, heads, headDim, xStride int, eps float64, cosS, sinS, yS, rstdS Storage[T]) {
	y, cos, sin, rows := normRoPEDims("NormRoPE", yS, cosS, sinS, batch, length, heads, headDim, xStride)
	x, w := HostData(xS, "NormRoPE x"), HostData(wS, "NormRoPE w")
	checkLen("NormRoPE x", len(x), StridedLen(batch*length, heads*headDim, xStride))
	var rstd []T
	if w != nil {
		checkLen("NormRoPE w", len(w), headDim)
		rstd = HostData(rstdS, "NormRoPE rstd")
		checkLen("NormRoPE rstd", len(rstd), rows)
	}
	h := headDim / 2
	c.parallel(rows, 1<<13/headDim+1, func(lo, hi int) {
		z := make([]float64, headDim)
		for i := lo; i < hi; i++ {
			r, o := headRows(i, length, heads, headDim)
			xs := x[headAt(i, heads, headDim, xStride):][:headDim]
			for k, v := range xs {
				z[k] = float64(v)
			}
			if w != nil {
				var ss float64
				for _, v := range z {
					ss += v * v
				}
				rs := 1 / math.Sqrt(ss/float64(headDim)+eps)
				rstd[i] = T(rs)
				for k := range z {
					z[k] *= rs * float64(w[k])
				}
			}
			cs, sn, ys := cos[r*h:(r+1)*h], sin[r*h:(r+1)*h], y[o:o+headDim]
			for k := range h {
				a, b, cc, s := z[k], z[k+h], float64(cs[k]), float64(sn[k])
				ys[k], ys[k+h] = T(a*cc-b*s), T(b*cc+a*s)
			}
		}
	})
}

// NormRoPEBackward writes (or with accumulate adds) dx and adds dw, the
// gradients of NormRoPE.
func (c *CPU[T]) NormRoPEBackward(xS, wS, rstdS, dyS Storage[T], batch, length, heads, headDim, xStride int, cosS, sinS, dxS, dwS Storage[T], accumulate bool) {
	dy, cos, sin, rows := normRoPEDims("NormRoPEBackward", dyS, cosS, sinS, batch, length, heads, headDim, xStride)
	span := StridedLen(batch*length, heads*headDim, xStride)
	x, w := HostData(xS, "NormRoPEBackward x"), HostData(wS, "NormRoPEBackward w")
	dx, dw := HostData(dxS, "NormRoPEBackward dx"), HostData(dwS, "NormRoPEBackward dw")
	var rstd []T
	if w != nil {
		checkLen("NormRoPEBackward x", len(x), span)
		checkLen("NormRoPEBackward w", len(w), headDim)
		rstd = HostData(rstdS, "NormRoPEBackward rstd")
		checkLen("NormRoPEBackward rstd", len(rstd), rows)
	} else if dw != nil {
		panic("tensor: NormRoPEBackward: dw without a weight")
	}
	h := headDim / 2
	// grad writes g = RoPE⁻¹(dy) of head row i into g, returning its x row
	// (nil without w).
	grad := func(i int, g []float64) []T {
		r, o := headRows(i, length, heads, headDim)
		cs, sn, d := cos[r*h:(r+1)*h], sin[r*h:(r+1)*h], dy[o:o+headDim]
		for k := range h {
			a, b, cc, s := float64(d[k]), float64(d[k+h]), float64(cs[k]), float64(sn[k])
			g[k], g[k+h] = a*cc+b*s, b*cc-a*s
		}
		if x == nil {
			return nil
		}
		return x[headAt(i, heads, headDim, xStride):][:headDim]
	}
	if dx != nil {
		checkLen("NormRoPEBackward dx", len(dx), span)
		c.parallel(rows, 1<<13/headDim+1, func(lo, hi int) {
			g := make([]float64, headDim)
			for i := lo; i < hi; i++ {
				xs, dxs := grad(i, g), dx[headAt(i, heads, headDim, xStride):][:headDim]
				if w == nil {
					for k, v := range g {
						put(dxs, k, T(v), accumulate)
					}
					continue
				}
				rs := float64(rstd[i])
				var dot float64 // Σ g·w·x̂
				for k, v := range xs {
					dot += g[k] * float64(w[k]) * float64(v) * rs
				}
				m := dot / float64(headDim)
				for k, v := range xs {
					put(dxs, k, T(rs*(g[k]*float64(w[k])-float64(v)*rs*m)), accumulate)
				}
			}
		})
	}
	if dw != nil {
		checkLen("NormRoPEBackward dw", len(dw), headDim)
		// Each part sums its range of rows; the parts are added in order.
		parts := min(c.workers, (rows+255)/256)
		acc := make([][]float64, parts)
		c.parallel(parts, 1, func(plo, phi int) {
			g := make([]float64, headDim)
			for p := plo; p < phi; p++ {
				acc[p] = make([]float64, headDim)
				for i := p * rows / parts; i < (p+1)*rows/parts; i++ {
					xs, rs := grad(i, g), float64(rstd[i])
					for k, v := range xs {
						acc[p][k] += g[k] * float64(v) * rs
					}
				}
			}
		})
		for k := range dw {
			var s float64
			for _, a := range acc {
				s += a[k]
			}
			dw[k] += T(s)
		}
	}
}
