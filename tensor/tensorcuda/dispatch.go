package tensorcuda

import (
	"fmt"
	"strings"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/tensor"
)

// The ops of tensor.Backend, dispatched on their arguments' dtypes (bf16
// activations and compute weights, fp32 statistics, master weights and
// parameter gradients):
//
//   - Gemm: bf16·bf16 → bf16 (Gemm), bf16·bf16 → fp32 (GemmF32Out: weight
//     gradients, beta 1 accumulates), fp32·fp32 → fp32 (the fp32 Ops' Gemm:
//     the loss Σ scale·CE).
//   - Axpy, AxpyBy: equal dtypes, or bf16 into fp32 and fp32 into bf16
//     (op_axpy_to_f32, op_axpy_from_f32); AxpyBy's scalar is fp32.
//   - Ops whose output is a gradient (ScatterAdd, SumRows, RMSNormBackward,
//     NormRoPEBackward, the inverse RoPE, SwiGLUBackward, accumulating
//     Copy2D and Transpose12) write or add into an output of the kernel's
//     dtype directly, and into one of the other dtype through a zero
//     temporary of the kernel's dtype that is then added with a converting
//     axpy (into), after zeroing the output when it is to be overwritten
//     (intoOut). ScatterAdd and the column sums (SumRows, RMSNorm's and
//     NormRoPE's dw) produce fp32, the others the dtype of their inputs.
//   - The rest take inputs of one dtype (the Ops of that dtype) with fp32
//     statistics (rstd, cos, sin, scale, loss).
//
// Anything else panics naming the op and the dtypes.

// unsupported panics for a combination of dtypes that has no kernel.
func unsupported(op string, bufs ...Buf) {
	var dts []string
	for _, b := range bufs {
		dts = append(dts, b.dt.String())
	}
	panic(fmt.Sprintf("tensorcuda: %s: dtypes (%s) are not supported on CUDA", op, strings.Join(dts, ", ")))
}

// same panics unless every buffer has the dtype of the first.
func same(op string, bufs ...Buf) dtype.DType {
	for _, x := range bufs[1:] {
		if x.dt != bufs[0].dt {
			unsupported(op, bufs...)
		}
	}
	return bufs[0].dt
}

// f32s panics unless every buffer is fp32 (statistics).
func f32s(op string, bufs ...Buf) {
	for _, x := range bufs {
		if x.dt != dtype.F32 {
			panic(fmt.Sprintf("tensorcuda: %s: a statistic is %s, want f32 (allocate it with AllocStat)", op, x.dt))
		}
	}
}

// into runs f on dst when dst holds want (or is absent), and otherwise on
// zero scratch of dtype want that it then adds into dst: how an op whose
// kernel accumulates in one dtype adds into a gradient of the other.
func (b *Backend) into(dst Buf, want dtype.DType, f func(out gpu.Buffer)) {
	if dst.n == 0 || dst.dt == want {
		f(dst.Buffer())
		return
	}
	tmp := b.newBuf(dst.n, want, false, true)
	f(tmp.Buffer())
	b.axpy(1, Buf{}, tmp, dst)
	b.freeTemp(tmp)
}

// intoOut is into for a kernel that overwrites its output or, with
// accumulate, adds to it: f gets the output and the flag to launch with.
// Through a temporary of the other dtype the kernel adds into zeros, and
// an output to be overwritten is zeroed before the temporary is added.
func (b *Backend) intoOut(dst Buf, want dtype.DType, accumulate bool, f func(out gpu.Buffer, accumulate bool)) {
	if dst.n == 0 || dst.dt == want {
		f(dst.Buffer(), accumulate)
		return
	}
	if !accumulate {
		must("zero", b.mem.zero(dst.Buffer()))
	}
	b.into(dst, want, func(out gpu.Buffer) { f(out, true) })
}

// axpy computes y += alpha·x, times s[0] when s is given, for any pair of
// dtypes.
func (b *Backend) axpy(alpha float32, s, x, y Buf) {
	checkLen("Axpy", x.n, y.n)
	n := int64(x.n)
	var err error
	switch {
	case x.dt == y.dt && s.n == 0:
		err = b.ops(x.dt).Axpy(alpha, x.Buffer(), y.Buffer(), n)
	case x.dt == y.dt:
		err = b.ops(x.dt).AxpyBy(alpha, s.Buffer(), x.Buffer(), y.Buffer(), n)
	case x.dt == dtype.BF16 && y.dt == dtype.F32:
		err = b.bf.AxpyToF32(alpha, s.Buffer(), x.Buffer(), y.Buffer(), n)
	case x.dt == dtype.F32 && y.dt == dtype.BF16:
		err = b.bf.AxpyFromF32(alpha, s.Buffer(), x.Buffer(), y.Buffer(), n)
	default:
		unsupported("Axpy", x, y)
	}
	must("Axpy", err)
}

// Gemm computes C = alpha·op(A)·op(B) + beta·C (tensor.Backend.Gemm).
func (b *Backend) Gemm(transA, transB bool, m, n, k int, alpha float32, aS tensor.Storage[float32], lda int, bS tensor.Storage[float32], ldb int, beta float32, cS tensor.Storage[float32], ldc int) {
	A, B, C := b.buf(aS, "Gemm A"), b.buf(bS, "Gemm B"), b.buf(cS, "Gemm C")
	label := gemmLabel(transA, transB, A.dt, C.dt)
	if B.dt == dtype.F8E4M3 {
		label = "Gemm NT fp8"
	}
	defer b.span(label, 2*float64(m)*float64(n)*float64(k), m, n, k)()
	var err error
	switch {
	case A.dt == dtype.BF16 && B.dt == dtype.BF16 && C.dt == dtype.BF16:
		err = b.bf.Gemm(transA, transB, m, n, k, alpha, A.Buffer(), lda, B.Buffer(), ldb, beta, C.Buffer(), ldc)
	case A.dt == dtype.BF16 && B.dt == dtype.BF16 && C.dt == dtype.F32:
		err = b.bf.GemmF32Out(transA, transB, m, n, k, alpha, A.Buffer(), lda, B.Buffer(), ldb, beta, C.Buffer(), ldc)
	case A.dt == dtype.F32 && B.dt == dtype.F32 && C.dt == dtype.F32:
		err = b.f32.Gemm(transA, transB, m, n, k, alpha, A.Buffer(), lda, B.Buffer(), ldb, beta, C.Buffer(), ldc)
	case (A.dt == dtype.BF16 || A.dt == dtype.F8E4M3) && B.dt == dtype.F8E4M3 && C.dt == dtype.BF16:
		err = b.linearFP8("Gemm", transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, C, ldc)
	default:
		unsupported("Gemm", A, B, C)
	}
	must("Gemm", err)
}

// GemmAdd computes D = alpha·op(A)·op(B) + C in one cuBLASLt product
// (tensor.Backend.GemmAdd), all four in one dtype.
func (b *Backend) GemmAdd(transA, transB bool, m, n, k int, alpha float32, aS tensor.Storage[float32], lda int, bS tensor.Storage[float32], ldb int, cS, dS tensor.Storage[float32], ldc int) {
	A, B, C, D := b.buf(aS, "GemmAdd A"), b.buf(bS, "GemmAdd B"), b.buf(cS, "GemmAdd C"), b.buf(dS, "GemmAdd D")
	if B.dt == dtype.F8E4M3 && (A.dt == dtype.BF16 || A.dt == dtype.F8E4M3) && same("GemmAdd", C, D) == dtype.BF16 {
		defer b.span("GemmAdd NT fp8", 2*float64(m)*float64(n)*float64(k), m, n, k)()
		must("GemmAdd", b.linearFP8("GemmAdd", transA, transB, m, n, k, alpha, A, lda, B, ldb, 1, C, D, ldc))
		return
	}
	dt := same("GemmAdd", A, B, C, D)
	defer b.span(gemmAddLabel(transA, transB, dt), 2*float64(m)*float64(n)*float64(k), m, n, k)()
	must("GemmAdd", b.ops(dt).GemmAdd(transA, transB, m, n, k, alpha, A.Buffer(), lda, B.Buffer(), ldb, C.Buffer(), D.Buffer(), ldc))
}

// Add computes out = a + b (one dtype).
func (b *Backend) Add(aS, bS, outS tensor.Storage[float32]) {
	a, bb, out := b.buf(aS, "Add a"), b.buf(bS, "Add b"), b.buf(outS, "Add out")
	defer b.span("Add", 0, a.n)()
	dt := same("Add", a, bb, out)
	checkLen("Add b", bb.n, a.n)
	checkLen("Add out", out.n, a.n)
	must("Add", b.ops(dt).Add(a.Buffer(), bb.Buffer(), out.Buffer(), int64(a.n)))
}

// Axpy computes y += alpha·x.
func (b *Backend) Axpy(alpha float32, x, y tensor.Storage[float32]) {
	defer b.span("Axpy", 0, x.Len())()
	b.axpy(alpha, Buf{}, b.buf(x, "Axpy x"), b.buf(y, "Axpy y"))
}

// AxpyBy computes y += alpha·s[0]·x with s fp32 on the device.
func (b *Backend) AxpyBy(alpha float32, s, x, y tensor.Storage[float32]) {
	sb := b.buf(s, "AxpyBy s")
	f32s("AxpyBy", sb)
	defer b.span("AxpyBy", 0, x.Len())()
	if sb.n < 1 {
		panic("tensorcuda: AxpyBy: empty scalar")
	}
	b.axpy(alpha, sb, b.buf(x, "AxpyBy x"), b.buf(y, "AxpyBy y"))
}

// Fill sets every element of s to v (a memset for 0).
func (b *Backend) Fill(s tensor.Storage[float32], v float64) {
	x := b.buf(s, "Fill")
	defer b.span("Fill", 0, x.n)()
	if x.n == 0 {
		return
	}
	if v == 0 {
		must("Fill", b.mem.zero(x.Buffer()))
		return
	}
	must("Fill", b.ops(x.dt).Fill(x.Buffer(), float32(v), int64(x.n)))
}

// Scale computes x *= alpha.
func (b *Backend) Scale(alpha float32, s tensor.Storage[float32]) {
	x := b.buf(s, "Scale")
	defer b.span("Scale", 0, x.n)()
	must("Scale", b.ops(x.dt).Scale(alpha, x.Buffer(), int64(x.n)))
}

// rowCount returns total/cols, panicking when cols does not divide total.
func rowCount(op string, total, cols int) int {
	if cols <= 0 || total%cols != 0 {
		panic(fmt.Sprintf("tensorcuda: %s: %d elements are not rows of %d", op, total, cols))
	}
	return total / cols
}

// AddRows computes y[r,:] += v (equal dtypes).
func (b *Backend) AddRows(yS, vS tensor.Storage[float32]) {
	y, v := b.buf(yS, "AddRows y"), b.buf(vS, "AddRows v")
	defer b.span("AddRows", 0, y.n/max(v.n, 1), v.n)()
	dt := same("AddRows", y, v)
	must("AddRows", b.ops(dt).AddRows(y.Buffer(), rowCount("AddRows", y.n, v.n), v.n, v.Buffer()))
}

// SumRows computes v += Σ_r y[r,:], summed in fp32.
func (b *Backend) SumRows(yS, vS tensor.Storage[float32]) {
	y, v := b.buf(yS, "SumRows y"), b.buf(vS, "SumRows v")
	defer b.span("SumRows", 0, y.n/max(v.n, 1), v.n)()
	rows := rowCount("SumRows", y.n, v.n)
	b.into(v, dtype.F32, func(out gpu.Buffer) {
		scratch := b.newBuf(int(ColumnScratch(rows, v.n)/4), dtype.F32, false, false)
		must("SumRows", b.ops(y.dt).SumRows(y.Buffer(), rows, v.n, out, scratch.Buffer()))
		b.freeTemp(scratch)
	})
}

// Copy2D copies (or adds) a rows×cols block between strided buffers; a
// copy needs equal dtypes, an accumulation may add into the other dtype.
func (b *Backend) Copy2D(rows, cols int, srcS tensor.Storage[float32], srcStride, srcOff int, dstS tensor.Storage[float32], dstStride, dstOff int, accumulate bool) {
	src, dst := b.buf(srcS, "Copy2D src"), b.buf(dstS, "Copy2D dst")
	defer b.span(accLabel("Copy2D", accumulate), 0, rows, cols)()
	if !accumulate {
		same("Copy2D", src, dst)
	}
	b.into(dst, src.dt, func(out gpu.Buffer) {
		must("Copy2D", b.ops(src.dt).Copy2D(rows, cols, src.Buffer(), srcStride, srcOff, out, dstStride, dstOff, accumulate))
	})
}

// Transpose12 permutes [A, B, C, D] to [A, C, B, D] (as Copy2D for dtypes).
func (b *Backend) Transpose12(a, bb, c, d int, srcS, dstS tensor.Storage[float32], accumulate bool) {
	src, dst := b.buf(srcS, "Transpose12 src"), b.buf(dstS, "Transpose12 dst")
	defer b.span(accLabel("Transpose12", accumulate), 0, a, bb, c, d)()
	checkLen("Transpose12", src.n, a*bb*c*d)
	checkLen("Transpose12", dst.n, a*bb*c*d)
	if !accumulate {
		same("Transpose12", src, dst)
	}
	b.into(dst, src.dt, func(out gpu.Buffer) {
		must("Transpose12", b.ops(src.dt).Transpose12(a, bb, c, d, src.Buffer(), out, accumulate))
	})
}

// Gather copies table rows: out[i,:] = table[ids[i],:] (equal dtypes).
func (b *Backend) Gather(tableS tensor.Storage[float32], dim int, idsS tensor.Ints, outS tensor.Storage[float32]) {
	table, out, ids := b.buf(tableS, "Gather table"), b.buf(outS, "Gather out"), b.ints(idsS, "Gather ids")
	defer b.span("Gather", 0, ids.n, dim)()
	dt := same("Gather", table, out)
	checkLen("Gather out", out.n, ids.n*dim)
	must("Gather", b.ops(dt).Gather(table.Buffer(), rowCount("Gather", table.n, dim), dim, ids.Buffer(), ids.n, out.Buffer()))
}

// ScatterAdd accumulates dtable[ids[i],:] += dout[i,:] (fp32 atomics).
func (b *Backend) ScatterAdd(doutS tensor.Storage[float32], dim int, idsS tensor.Ints, dtableS tensor.Storage[float32]) {
	dout, dtable, ids := b.buf(doutS, "ScatterAdd dout"), b.buf(dtableS, "ScatterAdd dtable"), b.ints(idsS, "ScatterAdd ids")
	defer b.span("ScatterAdd", 0, ids.n, dim)()
	checkLen("ScatterAdd dout", dout.n, ids.n*dim)
	rows := rowCount("ScatterAdd", dtable.n, dim)
	b.into(dtable, dtype.F32, func(out gpu.Buffer) {
		must("ScatterAdd", b.ops(dout.dt).ScatterAdd(dout.Buffer(), ids.n, dim, ids.Buffer(), out, rows))
	})
}

// RMSNorm computes y = x·rstd·w per row (x, w, y of one dtype; rstd fp32).
func (b *Backend) RMSNorm(xS, wS tensor.Storage[float32], dim int, eps float64, yS, rstdS tensor.Storage[float32]) {
	x, w, y, rstd := b.buf(xS, "RMSNorm x"), b.buf(wS, "RMSNorm w"), b.buf(yS, "RMSNorm y"), b.buf(rstdS, "RMSNorm rstd")
	f32s("RMSNorm", rstd)
	if y.dt == dtype.F8E4M3 { // an FP8 operand (AllocOperand)
		defer b.span("RMSNorm fp8", 0, x.n/max(dim, 1), dim)()
		dt := same("RMSNorm", x, w)
		rows := rowCount("RMSNorm", x.n, dim)
		checkLen("RMSNorm y", y.n, x.n)
		if y.cols != dim {
			panic(fmt.Sprintf("tensorcuda: RMSNorm into %v of rows of %d, not %d", y, y.cols, dim))
		}
		var stage Buf
		if !b.ops(dt).FusesNorm(dim) {
			stage = b.newBuf(x.n, dt, false, false)
		}
		must("RMSNorm", b.ops(dt).RMSNormE4M3(x.Buffer(), w.Buffer(), rows, dim, eps, y.Buffer(), y.scaleBuffer(), rstd.Buffer(), stage.Buffer()))
		b.freeTemp(stage) // nothing for the null one
		return
	}
	defer b.span("RMSNorm", 0, x.n/max(dim, 1), dim)()
	dt := same("RMSNorm", x, w, y)
	must("RMSNorm", b.ops(dt).RMSNorm(x.Buffer(), w.Buffer(), rowCount("RMSNorm", x.n, dim), dim, eps, y.Buffer(), rstd.Buffer()))
}

// RMSNormBackward writes or adds dx (in x's dtype) and adds dw (fp32 sums).
func (b *Backend) RMSNormBackward(xS, wS, rstdS, dyS tensor.Storage[float32], dim int, dxS, dwS tensor.Storage[float32], accumulate bool) {
	x, w, rstd, dy := b.buf(xS, "RMSNormBackward x"), b.buf(wS, "RMSNormBackward w"), b.buf(rstdS, "RMSNormBackward rstd"), b.buf(dyS, "RMSNormBackward dy")
	dx, dw := b.opt(dxS, "RMSNormBackward dx"), b.opt(dwS, "RMSNormBackward dw")
	defer b.span("RMSNormBackward", 0, x.n/max(dim, 1), dim)()
	dt := same("RMSNormBackward", x, w, dy)
	f32s("RMSNormBackward", rstd)
	rows := rowCount("RMSNormBackward", x.n, dim)
	// One call for both, so that the kernels may read x and dy once for dx
	// and dw; dx or dw of the other dtype goes through a temporary (a null
	// one is a null Buffer).
	b.intoOut(dx, dt, accumulate, func(dxOut gpu.Buffer, acc bool) {
		b.into(dw, dtype.F32, func(dwOut gpu.Buffer) {
			var scratch Buf
			if dwS != nil {
				scratch = b.newBuf(int(ColumnScratch(rows, dim)/4), dtype.F32, false, false)
			}
			must("RMSNormBackward", b.ops(dt).RMSNormBackward(x.Buffer(), w.Buffer(), rstd.Buffer(), dy.Buffer(), rows, dim, dxOut, dwOut, scratch.Buffer(), acc))
			b.freeTemp(scratch) // nothing for the null one
		})
	})
}

// RoPE rotates the heads of x into y (cos, sin fp32), writing y or adding
// to it; the inverse writes or adds into either dtype.
func (b *Backend) RoPE(xS tensor.Storage[float32], heads, headDim int, cosS, sinS tensor.Storage[float32], yS tensor.Storage[float32], inverse, accumulate bool) {
	x, y, cos, sin := b.buf(xS, "RoPE x"), b.buf(yS, "RoPE y"), b.buf(cosS, "RoPE cos"), b.buf(sinS, "RoPE sin")
	defer b.span(ropeLabel(inverse, accumulate), 0, x.n/max(heads*headDim, 1), heads, headDim)()
	f32s("RoPE", cos, sin)
	if !inverse {
		same("RoPE", x, y)
	}
	rows := rowCount("RoPE", cos.n, headDim/2)
	checkLen("RoPE x", x.n, rows*heads*headDim)
	b.intoOut(y, x.dt, accumulate, func(out gpu.Buffer, acc bool) {
		must("RoPE", b.ops(x.dt).RoPE(x.Buffer(), rows, heads, headDim, cos.Buffer(), sin.Buffer(), out, inverse, acc))
	})
}

// SwiGLU computes out = silu(gate)·up (one dtype).
func (b *Backend) SwiGLU(gateS, upS, outS tensor.Storage[float32]) {
	gate, up, out := b.buf(gateS, "SwiGLU gate"), b.buf(upS, "SwiGLU up"), b.buf(outS, "SwiGLU out")
	defer b.span("SwiGLU", 0, gate.n)()
	dt := same("SwiGLU", gate, up, out)
	must("SwiGLU", b.ops(dt).SwiGLU(gate.Buffer(), up.Buffer(), out.Buffer(), int64(gate.n)))
}

// SwiGLUBackward writes or adds dgate and dup, into either dtype.
func (b *Backend) SwiGLUBackward(gateS, upS, doutS, dgateS, dupS tensor.Storage[float32], accumulate bool) {
	gate, up, dout := b.buf(gateS, "SwiGLUBackward gate"), b.buf(upS, "SwiGLUBackward up"), b.buf(doutS, "SwiGLUBackward dout")
	dg, du := b.opt(dgateS, "SwiGLUBackward dgate"), b.opt(dupS, "SwiGLUBackward dup")
	defer b.span("SwiGLUBackward", 0, gate.n)()
	dt := same("SwiGLUBackward", gate, up, dout)
	b.intoOut(dg, dt, accumulate, func(g gpu.Buffer, gacc bool) {
		b.intoOut(du, dt, accumulate, func(u gpu.Buffer, uacc bool) {
			if gacc != uacc { // one goes through a temporary: both add
				if !gacc && g.Ptr != 0 {
					must("zero", b.mem.zero(g))
				}
				if !uacc && u.Ptr != 0 {
					must("zero", b.mem.zero(u))
				}
			}
			must("SwiGLUBackward", b.ops(dt).SwiGLUBackward(gate.Buffer(), up.Buffer(), dout.Buffer(), g, u, int64(gate.n), gacc || uacc))
		})
	})
}

// SwiGLUPacked computes out = silu(gate)·up from y2 [rows, 2·cols] holding
// gate and up side by side (one dtype).
func (b *Backend) SwiGLUPacked(y2S tensor.Storage[float32], cols int, outS tensor.Storage[float32]) {
	y2, out := b.buf(y2S, "SwiGLUPacked y2"), b.buf(outS, "SwiGLUPacked out")
	rows := rowCount("SwiGLUPacked", out.n, cols)
	if out.dt == dtype.F8E4M3 { // an FP8 operand (AllocOperand)
		defer b.span("SwiGLUPacked fp8", 0, rows, cols)()
		checkLen("SwiGLUPacked y2", y2.n, 2*out.n)
		if out.cols != cols {
			panic(fmt.Sprintf("tensorcuda: SwiGLUPacked into %v of rows of %d, not %d", out, out.cols, cols))
		}
		must("SwiGLUPacked", b.ops(y2.dt).SwiGLUPackedE4M3(y2.Buffer(), rows, cols, out.Buffer(), out.scaleBuffer()))
		return
	}
	defer b.span("SwiGLUPacked", 0, rows, cols)()
	dt := same("SwiGLUPacked", y2, out)
	checkLen("SwiGLUPacked y2", y2.n, 2*out.n)
	must("SwiGLUPacked", b.ops(dt).SwiGLUPacked(y2.Buffer(), out.Buffer(), int64(rows), cols))
}

// SwiGLUPackedBackward writes or adds SwiGLUPacked's gradients into dy2,
// of either dtype.
func (b *Backend) SwiGLUPackedBackward(y2S, doutS tensor.Storage[float32], cols int, dy2S tensor.Storage[float32], accumulate bool) {
	y2, dout, dy2 := b.buf(y2S, "SwiGLUPackedBackward y2"), b.buf(doutS, "SwiGLUPackedBackward dout"), b.buf(dy2S, "SwiGLUPackedBackward dy2")
	rows := rowCount("SwiGLUPackedBackward", dout.n, cols)
	defer b.span("SwiGLUPackedBackward", 0, rows, cols)()
	dt := same("SwiGLUPackedBackward", y2, dout)
	checkLen("SwiGLUPackedBackward y2", y2.n, 2*dout.n)
	checkLen("SwiGLUPackedBackward dy2", dy2.n, 2*dout.n)
	b.intoOut(dy2, dt, accumulate, func(out gpu.Buffer, acc bool) {
		must("SwiGLUPackedBackward", b.ops(dt).SwiGLUPackedBackward(y2.Buffer(), dout.Buffer(), out, int64(rows), cols, acc))
	})
}

// SoftmaxXent computes the per-row cross-entropy and overwrites logits with
// its scaled gradient (scale and loss fp32).
func (b *Backend) SoftmaxXent(logitsS tensor.Storage[float32], rows, vocab int, targetsS tensor.Ints, scaleS, lossS tensor.Storage[float32], argmaxS tensor.Ints) {
	logits, scale, loss := b.buf(logitsS, "SoftmaxXent logits"), b.buf(scaleS, "SoftmaxXent scale"), b.buf(lossS, "SoftmaxXent loss")
	targets, argmax := b.ints(targetsS, "SoftmaxXent targets"), b.ints(argmaxS, "SoftmaxXent argmax")
	defer b.span("SoftmaxXent", 0, rows, vocab)()
	f32s("SoftmaxXent", scale, loss)
	must("SoftmaxXent", b.ops(logits.dt).SoftmaxXent(logits.Buffer(), rows, vocab, targets.Buffer(), scale.Buffer(), loss.Buffer(), argmax.Buffer()))
}

// ArgmaxRows writes the argmax of each row of x (either dtype) into out.
func (b *Backend) ArgmaxRows(xS tensor.Storage[float32], rows, cols int, outS tensor.Ints) {
	x, out := b.buf(xS, "ArgmaxRows x"), b.ints(outS, "ArgmaxRows out")
	defer b.span("ArgmaxRows", 0, rows, cols)()
	checkLen("ArgmaxRows x", x.n, rows*cols)
	checkLen("ArgmaxRows out", out.n, rows)
	must("ArgmaxRows", b.ops(x.dt).ArgmaxRows(x.Buffer(), rows, cols, out.Buffer()))
}
