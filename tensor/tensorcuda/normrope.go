package tensorcuda

import (
	"fmt"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/ceil"
	"dflash/tensor"
)

// normRoPESizes checks NormRoPE's shared arguments and returns the head
// rows (batch·length·heads), half the head dimension and the elements that
// x (and dx), of rows xStride apart, span.
func (o *Ops) normRoPESizes(op string, batch, length, heads, headDim, xStride int, cos, sin gpu.Buffer) (rows, half int, span int64) {
	if headDim <= 0 || headDim%2 != 0 {
		panic(fmt.Sprintf("tensorcuda: %s: head dimension %d is not positive and even", op, headDim))
	}
	if xStride < heads*headDim || xStride >= 1<<31 {
		panic(fmt.Sprintf("tensorcuda: %s: row stride %d is less than heads×headDim %d×%d or not below 2³¹", op, xStride, heads, headDim))
	}
	rows64 := int64(batch) * int64(length) * int64(heads)
	if rows64 >= 1<<31 {
		panic(fmt.Sprintf("tensorcuda: %s: %d head rows (the kernels take fewer than 2³¹)", op, rows64))
	}
	half = headDim / 2
	need(op, "cos", cos, int64(batch)*int64(length)*int64(half), 4)
	need(op, "sin", sin, int64(batch)*int64(length)*int64(half), 4)
	if r := int64(batch) * int64(length); r > 0 {
		span = (r-1)*int64(xStride) + int64(heads)*int64(headDim)
	}
	return batch * length * heads, half, span
}

// pairLanes returns the threads per head row of the NormRoPE kernels: one
// per pair of 16-byte vectors (columns k and k + half), a power of two, at
// most a warp.
func (o *Ops) pairLanes(half int) int {
	if l := o.normLanes(half); l > 0 {
		return l
	}
	return 32
}

// NormRoPE computes, for x [batch, length, heads, headDim] (storage dtype,
// rows (b, l) xStride elements apart) and each head row, rstd = 1/sqrt(mean(x²)+eps) (fp32 [batch·length·heads])
// and writes RoPE(x·rstd·w) at its place in y [batch, heads, length,
// headDim], rotated by the fp32 tables cos and sin [batch·length,
// headDim/2] in HF's rotate_half convention. With w null there is no norm
// and rstd is not written (it may be null).
func (o *Ops) NormRoPE(x, w gpu.Buffer, batch, length, heads, headDim, xStride int, eps float64, cos, sin, y, rstd gpu.Buffer) error {
	rows, half, span := o.normRoPESizes("NormRoPE", batch, length, heads, headDim, xStride, cos, sin)
	n := int64(rows) * int64(headDim)
	need("NormRoPE", "x", x, span, o.es())
	need("NormRoPE", "y", y, n, o.es())
	optional("NormRoPE", "w", w, int64(headDim), o.es())
	if w.Ptr != 0 {
		need("NormRoPE", "rstd", rstd, int64(rows), 4)
	}
	if n == 0 {
		return nil
	}
	lanes := o.pairLanes(half)
	c := o.begin(kNormRoPE).ptr("x", x).ptr("w", w).ptr("cos", cos).ptr("sin", sin).ptr("y", y).ptr("rstd", rstd).
		i32("batch", batch).i32("length", length).i32("heads", heads).i32("half", half).i32("x_stride", xStride).f32("eps", float32(eps)).i32("lanes", lanes)
	return o.launch(c, o.strided(int64(rows)*int64(lanes)), threads)
}

// NormRoPEBackward computes NormRoPE's gradients for dy [batch, heads,
// length, headDim] and x and dx of rows xStride apart: with g = dy's head row rotated by −angle and
// x̂ = x·rstd, dx = rstd·(g·w − x̂·mean(g·w·x̂)) (storage dtype; dx = g
// with w null, when x and rstd are not read; added to dx with accumulate)
// and dw += Σ g·x̂ (fp32, always added; deterministic through scratch of
// ColumnScratch(rows, headDim) bytes, as RMSNormBackward's). dx or dw may
// be null; dw needs w.
func (o *Ops) NormRoPEBackward(x, w, rstd, cos, sin, dy gpu.Buffer, batch, length, heads, headDim, xStride int, dx, dw, scratch gpu.Buffer, accumulate bool) error {
	rows, half, span := o.normRoPESizes("NormRoPEBackward", batch, length, heads, headDim, xStride, cos, sin)
	n := int64(rows) * int64(headDim)
	need("NormRoPEBackward", "dy", dy, n, o.es())
	optional("NormRoPEBackward", "dx", dx, span, o.es())
	optional("NormRoPEBackward", "dw", dw, int64(headDim), 4)
	if w.Ptr != 0 {
		need("NormRoPEBackward", "x", x, span, o.es())
		need("NormRoPEBackward", "w", w, int64(headDim), o.es())
		need("NormRoPEBackward", "rstd", rstd, int64(rows), 4)
	} else if dw.Ptr != 0 {
		panic("tensorcuda: NormRoPEBackward: dw without a weight")
	}
	if n == 0 {
		return nil
	}
	if dx.Ptr != 0 {
		lanes := o.pairLanes(half)
		c := o.begin(kNormRoPEDX).ptr("x", x).ptr("w", w).ptr("rstd", rstd).ptr("cos", cos).ptr("sin", sin).ptr("dy", dy).ptr("dx", dx).
			i32("batch", batch).i32("length", length).i32("heads", heads).i32("half", half).i32("x_stride", xStride).i32("lanes", lanes).flag("accumulate", accumulate)
		if err := o.launch(c, o.strided(int64(rows)*int64(lanes)), threads); err != nil {
			return err
		}
	}
	if dw.Ptr == 0 {
		return nil
	}
	need("NormRoPEBackward", "scratch", scratch, ColumnScratch(rows, headDim)/4, 4)
	per, nc := chunks(rows, headDim)
	// Vectors of 16 bytes when they fit (op_norm_rope_bwd_dw; its shared
	// memory is sized for blocks of threads threads).
	v := 16 / int(o.es())
	vec := half%v == 0 && xStride%v == 0 && headDim <= threads && aligned16(x, dy, cos, sin)
	c := o.begin(kNormRoPEDW).ptr("x", x).ptr("rstd", rstd).ptr("cos", cos).ptr("sin", sin).ptr("dy", dy).ptr("partial", scratch).
		i32("batch", batch).i32("length", length).i32("heads", heads).i32("half", half).i32("x_stride", xStride).i32("rows_per_chunk", per).
		flag("vec", vec)
	if err := o.launch(c, cuda.Dim(uint32(ceil.Div(headDim, threads)), uint32(nc), 1), threads); err != nil {
		return err
	}
	return o.colSum(scratch, nc, headDim, dw)
}

// NormRoPE normalises (with w), rotates and moves the heads of x into y (x,
// w, y of one dtype; rstd, cos, sin fp32).
func (b *Backend) NormRoPE(xS, wS tensor.Storage[float32], batch, length, heads, headDim, xStride int, eps float64, cosS, sinS, yS, rstdS tensor.Storage[float32]) {
	x, y, cos, sin := b.buf(xS, "NormRoPE x"), b.buf(yS, "NormRoPE y"), b.buf(cosS, "NormRoPE cos"), b.buf(sinS, "NormRoPE sin")
	w, rstd := b.opt(wS, "NormRoPE w"), b.opt(rstdS, "NormRoPE rstd")
	defer b.span("NormRoPE", 0, batch*length, heads, headDim)()
	dt := same("NormRoPE", x, y)
	if wS != nil {
		same("NormRoPE", x, w)
		f32s("NormRoPE", rstd)
	}
	f32s("NormRoPE", cos, sin)
	checkLen("NormRoPE x", x.n, tensor.StridedLen(batch*length, heads*headDim, xStride))
	checkLen("NormRoPE y", y.n, batch*length*heads*headDim)
	must("NormRoPE", b.ops(dt).NormRoPE(x.Buffer(), w.Buffer(), batch, length, heads, headDim, xStride, eps, cos.Buffer(), sin.Buffer(), y.Buffer(), rstd.Buffer()))
}

// NormRoPEBackward writes or adds dx (in dy's dtype) and adds dw (fp32
// sums), into either dtype; a strided dx (xStride > heads·headDim) must be
// of dy's dtype (a conversion would touch the columns between its rows).
func (b *Backend) NormRoPEBackward(xS, wS, rstdS, dyS tensor.Storage[float32], batch, length, heads, headDim, xStride int, cosS, sinS, dxS, dwS tensor.Storage[float32], accumulate bool) {
	dy, cos, sin := b.buf(dyS, "NormRoPEBackward dy"), b.buf(cosS, "NormRoPEBackward cos"), b.buf(sinS, "NormRoPEBackward sin")
	x, w, rstd := b.opt(xS, "NormRoPEBackward x"), b.opt(wS, "NormRoPEBackward w"), b.opt(rstdS, "NormRoPEBackward rstd")
	dx, dw := b.opt(dxS, "NormRoPEBackward dx"), b.opt(dwS, "NormRoPEBackward dw")
	defer b.span("NormRoPEBackward", 0, batch*length, heads, headDim)()
	dt := dy.dt
	if wS != nil {
		same("NormRoPEBackward", dy, x, w)
		f32s("NormRoPEBackward", rstd)
	}
	f32s("NormRoPEBackward", cos, sin)
	checkLen("NormRoPEBackward dy", dy.n, batch*length*heads*headDim)
	if wS != nil {
		checkLen("NormRoPEBackward x", x.n, tensor.StridedLen(batch*length, heads*headDim, xStride))
	}
	o, none := b.ops(dt), gpu.Buffer{}
	if dxS != nil {
		checkLen("NormRoPEBackward dx", dx.n, tensor.StridedLen(batch*length, heads*headDim, xStride))
		if xStride != heads*headDim && dx.dt != dt {
			panic(fmt.Sprintf("tensorcuda: NormRoPEBackward: strided dx of dtype %v for dy of %v", dx.dt, dt))
		}
		b.intoOut(dx, dt, accumulate, func(out gpu.Buffer, acc bool) {
			must("NormRoPEBackward", o.NormRoPEBackward(x.Buffer(), w.Buffer(), rstd.Buffer(), cos.Buffer(), sin.Buffer(), dy.Buffer(), batch, length, heads, headDim, xStride, out, none, none, acc))
		})
	}
	if dwS != nil {
		rows := batch * length * heads
		b.into(dw, dtype.F32, func(out gpu.Buffer) {
			scratch := b.newBuf(int(ColumnScratch(rows, headDim)/4), dtype.F32, false, false)
			must("NormRoPEBackward", o.NormRoPEBackward(x.Buffer(), w.Buffer(), rstd.Buffer(), cos.Buffer(), sin.Buffer(), dy.Buffer(), batch, length, heads, headDim, xStride, none, out, scratch.Buffer(), true))
			b.freeTemp(scratch)
		})
	}
}

// aligned16 reports whether every buffer starts on a 16-byte boundary.
func aligned16(bs ...gpu.Buffer) bool {
	for _, b := range bs {
		if b.Ptr%16 != 0 {
			return false
		}
	}
	return true
}
