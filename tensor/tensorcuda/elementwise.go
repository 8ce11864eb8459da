package tensorcuda

import (
	"fmt"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/internal/ceil"
)

// Add computes out = a + b over n storage elements (out may be a or b).
func (o *Ops) Add(a, b, out gpu.Buffer, n int64) error {
	need("Add", "a", a, n, o.es())
	need("Add", "b", b, n, o.es())
	need("Add", "out", out, n, o.es())
	if n == 0 {
		return nil
	}
	return o.launch(o.begin(kAdd).ptr("a", a).ptr("b", b).ptr("out", out).i64("n", n), o.vecStrided(n), threads)
}

// Axpy computes y += alpha·x over n storage elements.
func (o *Ops) Axpy(alpha float32, x, y gpu.Buffer, n int64) error {
	need("Axpy", "x", x, n, o.es())
	need("Axpy", "y", y, n, o.es())
	if n == 0 {
		return nil
	}
	return o.launch(o.begin(kAxpy).f32("alpha", alpha).ptr("x", x).ptr("y", y).i64("n", n), o.vecStrided(n), threads)
}

// Scale computes x *= alpha over n storage elements.
func (o *Ops) Scale(alpha float32, x gpu.Buffer, n int64) error {
	need("Scale", "x", x, n, o.es())
	if n == 0 {
		return nil
	}
	return o.launch(o.begin(kScale).f32("alpha", alpha).ptr("x", x).i64("n", n), o.vecStrided(n), threads)
}

// AxpyBy computes y += alpha·s[0]·x over n storage elements, with s one
// fp32 value on the device.
func (o *Ops) AxpyBy(alpha float32, s, x, y gpu.Buffer, n int64) error {
	need("AxpyBy", "s", s, 1, 4)
	return o.axpyVia(kAxpyBy, "AxpyBy", alpha, s, x, o.es(), y, o.es(), n)
}

// AxpyToF32 computes y += alpha·x (times s[0] unless s is null) with x in
// storage dtype and y fp32, over n elements.
func (o *Ops) AxpyToF32(alpha float32, s, x, y gpu.Buffer, n int64) error {
	optional("AxpyToF32", "s", s, 1, 4)
	return o.axpyVia(kAxpyToF32, "AxpyToF32", alpha, s, x, o.es(), y, 4, n)
}

// AxpyFromF32 computes y += alpha·x (times s[0] unless s is null) with x
// fp32 and y in storage dtype, over n elements.
func (o *Ops) AxpyFromF32(alpha float32, s, x, y gpu.Buffer, n int64) error {
	optional("AxpyFromF32", "s", s, 1, 4)
	return o.axpyVia(kAxpyFromF32, "AxpyFromF32", alpha, s, x, 4, y, o.es(), n)
}

// axpyVia checks and launches one of the axpys with a scalar pointer.
func (o *Ops) axpyVia(k *kernel, op string, alpha float32, s, x gpu.Buffer, xes int64, y gpu.Buffer, yes int64, n int64) error {
	need(op, "x", x, n, xes)
	need(op, "y", y, n, yes)
	if n == 0 {
		return nil
	}
	return o.launch(o.begin(k).f32("alpha", alpha).ptr("s", s).ptr("x", x).ptr("y", y).i64("n", n), o.vecStrided(n), threads)
}

// Fill sets n storage elements of x to v (rounded to storage once).
func (o *Ops) Fill(x gpu.Buffer, v float32, n int64) error {
	need("Fill", "x", x, n, o.es())
	if n == 0 {
		return nil
	}
	return o.launch(o.begin(kFill).ptr("x", x).f32("v", v).i64("n", n), o.vecStrided(n), threads)
}

// AddRows computes y[r,:] += v for every row of y [rows, n] (storage dtype,
// v [n] too).
func (o *Ops) AddRows(y gpu.Buffer, rows, n int, v gpu.Buffer) error {
	total := int64(rows) * int64(n)
	need("AddRows", "y", y, total, o.es())
	need("AddRows", "v", v, int64(n), o.es())
	if total == 0 {
		return nil
	}
	c := o.begin(kAddRows).ptr("y", y).ptr("v", v).i64("total", total).i32("n", n)
	return o.launch(c, o.vecStrided(total), threads)
}

// SumRows computes v += Σ_r y[r,:] (AddRows' gradient) for y [rows, n] in
// storage dtype and v [n] fp32, deterministically through scratch of
// ColumnScratch(rows, n) bytes.
func (o *Ops) SumRows(y gpu.Buffer, rows, n int, v, scratch gpu.Buffer) error {
	need("SumRows", "y", y, int64(rows)*int64(n), o.es())
	need("SumRows", "v", v, int64(n), 4)
	if rows == 0 || n == 0 {
		return nil
	}
	need("SumRows", "scratch", scratch, ColumnScratch(rows, n)/4, 4)
	per, nc := chunks(rows, n)
	c := o.begin(kSumRows).ptr("y", y).ptr("partial", scratch).i32("rows", rows).i32("n", n).i32("rows_per_chunk", per)
	if err := o.launch(c, cuda.Dim(uint32(ceil.Div(n, threads)), uint32(nc), 1), threads); err != nil {
		return err
	}
	return o.colSum(scratch, nc, n, v)
}

// Copy2D copies a rows×cols block of storage elements:
// dst[r·dstStride+dstOff+c] (+)= src[r·srcStride+srcOff+c], adding with
// accumulate.
func (o *Ops) Copy2D(rows, cols int, src gpu.Buffer, srcStride, srcOff int, dst gpu.Buffer, dstStride, dstOff int, accumulate bool) error {
	if rows == 0 || cols == 0 {
		return nil
	}
	if rows > 1 && (srcOff+cols > srcStride || dstOff+cols > dstStride) {
		panic(fmt.Sprintf("tensorcuda: Copy2D: block of %d cols at offsets %d/%d exceeds strides %d/%d", cols, srcOff, dstOff, srcStride, dstStride))
	}
	need("Copy2D", "src", src, int64(rows-1)*int64(srcStride)+int64(srcOff+cols), o.es())
	need("Copy2D", "dst", dst, int64(rows-1)*int64(dstStride)+int64(dstOff+cols), o.es())
	c := o.begin(kCopy2D).ptr("src", src).i64("src_stride", int64(srcStride)).i64("src_off", int64(srcOff)).
		ptr("dst", dst).i64("dst_stride", int64(dstStride)).i64("dst_off", int64(dstOff)).
		i32("rows", rows).i32("cols", cols).flag("accumulate", accumulate)
	return o.launch(c, o.vecStrided(int64(rows)*int64(cols)), threads)
}

// Transpose12 permutes src [a, b, c, d] to dst [a, c, b, d]:
// dst[a,c,b,d] (+)= src[a,b,c,d], adding with accumulate.
func (o *Ops) Transpose12(a, b, c, d int, src, dst gpu.Buffer, accumulate bool) error {
	n := int64(a) * int64(b) * int64(c) * int64(d)
	need("Transpose12", "src", src, n, o.es())
	need("Transpose12", "dst", dst, n, o.es())
	if n == 0 {
		return nil
	}
	cl := o.begin(kTranspose12).ptr("src", src).ptr("dst", dst).i32("na", a).i32("nb", b).i32("nc", c).i32("nd", d).flag("accumulate", accumulate)
	return o.launch(cl, o.vecStrided(n), threads)
}
