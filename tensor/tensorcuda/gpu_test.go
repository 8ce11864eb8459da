package tensorcuda

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

func TestGPUEmbedding(t *testing.T) {
	forDTypes(t, func(e *env) {
		for _, c := range []struct{ rows, dim, n int }{{1, 1, 1}, {5, 7, 7}, {100, 33, 33}, {37, 64, 100}, {1000, 1024, 65}} {
			name := fmt.Sprintf("rows%d_dim%d_n%d", c.rows, c.dim, c.n)
			table, tv := e.store(e.normal(c.rows*c.dim, 1))
			ids := make([]int32, c.n)
			for i := range ids {
				ids[i] = int32(e.r.IntN(c.rows)) // repeats when n > rows
			}
			idb := e.ints(ids)
			out := e.out(c.n * c.dim)
			e.check(e.o.Gather(table, c.rows, c.dim, idb, c.n, out))
			want := make([]float64, c.n*c.dim)
			ref.Gather(tv, c.dim, ids, want)
			e.compare("Gather "+name, e.load(out, c.n*c.dim), want, 0)

			dout, dv := e.store(e.normal(c.n*c.dim, 1))
			dtable, dt := e.f32(e.normal(c.rows*c.dim, 1))
			e.check(e.o.ScatterAdd(dout, c.n, c.dim, idb, dtable, c.rows))
			ref.ScatterAdd(dv, c.dim, ids, dt)
			e.compare("ScatterAdd "+name, e.loadF32(dtable, c.rows*c.dim), dt, tolF32Reduce)
		}
		// An id out of range writes a NaN row and leaves the others alone.
		table, _ := e.store(e.normal(4*8, 1))
		out := e.out(3 * 8)
		e.check(e.o.Gather(table, 4, 8, e.ints([]int32{0, 4, 3}), 3, out))
		got := e.load(out, 3*8)
		for i, v := range got {
			if bad := i >= 8 && i < 16; bad != math.IsNaN(v) {
				e.t.Errorf("Gather with id 4 of 4 rows: element %d = %g", i, v)
			}
		}
	})
}

func TestGPURMSNorm(t *testing.T) {
	forDTypes(t, func(e *env) {
		// Dims up to smallNormDim run the _small kernels (several rows per
		// block; 20000 rows of 128 exceed one pass of the grid), larger ones
		// one block per row; 7 and 100 take the scalar loops, 1000 in bf16 too.
		// dx with dw takes the fused kernel past smallNormDim when rows are
		// whole vectors (all of those here but 1030; 3000 rows of 4096 are
		// 188 chunks, the last of 8 rows), dw alone the dw kernel's vector
		// path (4096 in bf16: two blocks a row) or, for 7, 100 in bf16 and
		// 1030, its scalar one.
		for _, c := range []struct{ rows, dim int }{{1, 1}, {7, 7}, {33, 64}, {129, 64}, {5, 100}, {20000, 128}, {77, 256},
			{300, 1000}, {50, smallNormDim}, {9, smallNormDim + 8}, {5, smallNormDim + 6}, {64, 4096}, {3000, 4096}, {3, 5000}, {2, 81920}} {
			name := fmt.Sprintf("rows%d_dim%d", c.rows, c.dim)
			n := c.rows * c.dim
			const eps = 1e-6
			x, xv := e.store(e.normal(n, 2))
			w, wv := e.store(e.normal(c.dim, 1))
			y, rstd := e.out(n), e.outF32(c.rows)
			e.check(e.o.RMSNorm(x, w, c.rows, c.dim, eps, y, rstd))
			wy, wr := make([]float64, n), make([]float64, c.rows)
			ref.RMSNorm(xv, wv, c.dim, eps, wy, wr)
			e.compare("RMSNorm y "+name, e.load(y, n), wy, tol(e.dt, true))
			gr := e.loadF32(rstd, c.rows)
			e.compare("RMSNorm rstd "+name, gr, wr, tolF32Reduce)

			// The backward reads the device's rstd; the reference gets the same values.
			dy, dyv := e.store(e.normal(n, 1))
			dx, dxv := e.store(e.normal(n, 1))
			dw, dwv := e.f32(e.normal(c.dim, 1))
			scratch := e.alloc(ColumnScratch(c.rows, c.dim), 0xff)
			e.check(e.o.RMSNormBackward(x, w, rstd, dy, c.rows, c.dim, dx, dw, scratch, true))
			ref.RMSNormBackward(xv, wv, gr, dyv, c.dim, dxv, dwv, true)
			e.compare("RMSNormBackward dx "+name, e.load(dx, n), dxv, tol(e.dt, true))
			e.compare("RMSNormBackward dw "+name, e.loadF32(dw, c.dim), dwv, tolF32Reduce)

			// dw alone (the dw kernel), added to its last value.
			e.check(e.o.RMSNormBackward(x, w, rstd, dy, c.rows, c.dim, gpu.Buffer{}, dw, scratch, false))
			ref.RMSNormBackward(xv, wv, gr, dyv, c.dim, nil, dwv, false)
			e.compare("RMSNormBackward dw alone "+name, e.loadF32(dw, c.dim), dwv, tolF32Reduce)

			// Written, not accumulated: dx starts poisoned.
			fx, fxv := e.out(n), make([]float64, n)
			e.check(e.o.RMSNormBackward(x, w, rstd, dy, c.rows, c.dim, fx, gpu.Buffer{}, gpu.Buffer{}, false))
			ref.RMSNormBackward(xv, wv, gr, dyv, c.dim, fxv, nil, false)
			// dx's terms are of the size of dy·w·rstd; with dim 1 they cancel
			// (x̂ = ±1) and dx is rounding noise on that scale.
			terms := make([]float64, n)
			for i := range terms {
				terms[i] = dyv[i] * wv[i%c.dim] * gr[i/c.dim]
			}
			e.compareFloor("RMSNormBackward dx written "+name, e.load(fx, n), fxv, tol(e.dt, true), rms(terms))
		}
	})
}

func TestGPURoPE(t *testing.T) {
	forDTypes(t, func(e *env) {
		for _, c := range []struct{ rows, heads, hd int }{{1, 1, 2}, {7, 3, 6}, {33, 8, 64}, {17, 5, 128}} {
			name := fmt.Sprintf("rows%d_heads%d_hd%d", c.rows, c.heads, c.hd)
			n, h := c.rows*c.heads*c.hd, c.hd/2
			ang := e.normal(c.rows*h, 3)
			cs, sn := make([]float64, len(ang)), make([]float64, len(ang))
			for i, a := range ang {
				cs[i], sn[i] = math.Cos(a), math.Sin(a)
			}
			cb, cv := e.f32(cs)
			sb, sv := e.f32(sn)
			x, xv := e.store(e.normal(n, 1))
			y := e.out(n)
			e.check(e.o.RoPE(x, c.rows, c.heads, c.hd, cb, sb, y, false, false))
			want := make([]float64, n)
			ref.RoPE(xv, c.heads, c.hd, cv, sv, want, false, false)
			e.compare("RoPE "+name, e.load(y, n), want, tol(e.dt, false))

			acc, av := e.store(e.normal(n, 1))
			e.check(e.o.RoPE(x, c.rows, c.heads, c.hd, cb, sb, acc, true, true))
			ref.RoPE(xv, c.heads, c.hd, cv, sv, av, true, true)
			e.compare("RoPE inverse "+name, e.load(acc, n), av, tol(e.dt, false))

			inv, iv := e.out(n), make([]float64, n)
			e.check(e.o.RoPE(x, c.rows, c.heads, c.hd, cb, sb, inv, true, false))
			ref.RoPE(xv, c.heads, c.hd, cv, sv, iv, true, false)
			e.compare("RoPE inverse written "+name, e.load(inv, n), iv, tol(e.dt, false))
		}
	})
}

// TestGPUNormRoPE: the fused QK-norm + RoPE + head move and its backward
// against the CPU's, with and without a weight; head dims 128 and 64 take
// the vector path in both dtypes, 6 and 2 the scalar one; 2·2500·8 head
// rows exceed one pass of the grid. Cases with pad read x and write dx
// with rows heads·hd + pad apart (a block of a product's columns): an odd
// pad takes the scalar path; the elements between the rows must stay as
// they were.
func TestGPUNormRoPE(t *testing.T) {
	forDTypes(t, func(e *env) {
		for _, c := range []struct{ batch, length, heads, hd, pad int }{
			{1, 1, 1, 2, 0}, {2, 7, 3, 6, 0}, {2, 33, 8, 64, 0}, {3, 17, 5, 128, 0}, {2, 2500, 8, 128, 0},
			{2, 7, 3, 6, 5}, {2, 33, 8, 64, 3 * 64}, {3, 17, 2, 128, 6 * 128}, {1, 5, 2, 64, 1},
		} {
			for _, weight := range []bool{true, false} {
				name := fmt.Sprintf("%dx%dx%dx%d_pad%d_weight=%v", c.batch, c.length, c.heads, c.hd, c.pad, weight)
				rows, n, hf := c.batch*c.length*c.heads, c.batch*c.length*c.heads*c.hd, c.hd/2
				stride := c.heads*c.hd + c.pad
				span := tensor.StridedLen(c.batch*c.length, c.heads*c.hd, stride)
				const eps = 1e-6
				ang := e.normal(c.batch*c.length*hf, 3)
				cs, sn := make([]float64, len(ang)), make([]float64, len(ang))
				for i, a := range ang {
					cs[i], sn[i] = math.Cos(a), math.Sin(a)
				}
				cb, cv := e.f32(cs)
				sb, sv := e.f32(sn)
				x, xv := e.store(e.normal(span, 2))
				var w, rstd gpu.Buffer
				var wv, wr []float64
				if weight {
					w, wv = e.store(e.normal(c.hd, 1))
					rstd, wr = e.outF32(rows), make([]float64, rows)
				}
				y := e.out(n)
				e.check(e.o.NormRoPE(x, w, c.batch, c.length, c.heads, c.hd, stride, eps, cb, sb, y, rstd))
				wy := make([]float64, n)
				ref.NormRoPE(xv, wv, c.batch, c.length, c.heads, c.hd, stride, eps, cv, sv, wy, wr)
				e.compare("NormRoPE y "+name, e.load(y, n), wy, tol(e.dt, true))
				var gr []float64
				if weight {
					gr = e.loadF32(rstd, rows)
					e.compare("NormRoPE rstd "+name, gr, wr, tolF32Reduce)
				}

				// The backward reads the device's rstd; the reference gets the same values.
				dy, dyv := e.store(e.normal(n, 1))
				dx, dxv := e.store(e.normal(span, 1))
				var dw, scratch gpu.Buffer
				var dwv []float64
				if weight {
					dw, dwv = e.f32(e.normal(c.hd, 1))
					scratch = e.alloc(ColumnScratch(rows, c.hd), 0xff)
				}
				xb := x
				if !weight {
					xb, xv = gpu.Buffer{}, nil // not read without a weight
				}
				e.check(e.o.NormRoPEBackward(xb, w, rstd, cb, sb, dy, c.batch, c.length, c.heads, c.hd, stride, dx, dw, scratch, true))
				ref.NormRoPEBackward(xv, wv, gr, dyv, c.batch, c.length, c.heads, c.hd, stride, cv, sv, dxv, dwv, true)
				e.compare("NormRoPEBackward dx "+name, e.load(dx, span), dxv, tol(e.dt, true))
				if weight {
					e.compare("NormRoPEBackward dw "+name, e.loadF32(dw, c.hd), dwv, tolF32Reduce)
				}

				// Written, not accumulated: dx starts poisoned; its rows are compared.
				fx, fxv := e.out(span), make([]float64, span)
				e.check(e.o.NormRoPEBackward(xb, w, rstd, cb, sb, dy, c.batch, c.length, c.heads, c.hd, stride, fx, gpu.Buffer{}, gpu.Buffer{}, false))
				ref.NormRoPEBackward(xv, wv, gr, dyv, c.batch, c.length, c.heads, c.hd, stride, cv, sv, fxv, nil, false)
				got := e.load(fx, span)
				e.compare("NormRoPEBackward dx written "+name, stridedRows(got, c.heads*c.hd, stride), stridedRows(fxv, c.heads*c.hd, stride), tol(e.dt, true))
			}
		}
	})
}

// stridedRows returns the rows of width values, stride apart, of a.
func stridedRows(a []float64, width, stride int) []float64 {
	var out []float64
	for o := 0; o+width <= len(a); o += stride {
		out = append(out, a[o:o+width]...)
	}
	return out
}

func TestGPUSwiGLU(t *testing.T) {
	forDTypes(t, func(e *env) {
		for _, n := range []int{1, 7, 1000, 100003} {
			name := fmt.Sprintf("n%d", n)
			g, gv := e.store(e.normal(n, 3))
			u, uv := e.store(e.normal(n, 1))
			out := e.out(n)
			e.check(e.o.SwiGLU(g, u, out, int64(n)))
			want := make([]float64, n)
			ref.SwiGLU(gv, uv, want)
			e.compare("SwiGLU "+name, e.load(out, n), want, tol(e.dt, false))

			// Accumulated: a gradient added to a value of its size may cancel
			// to near zero, so errors are relative to the larger of the
			// result's and the accumulator's scale.
			dout, dov := e.store(e.normal(n, 1))
			dg, dgv := e.store(e.normal(n, 1))
			du, duv := e.store(e.normal(n, 1))
			dgFloor, duFloor := rms(dgv), rms(duv)
			e.check(e.o.SwiGLUBackward(g, u, dout, dg, du, int64(n), true))
			ref.SwiGLUBackward(gv, uv, dov, dgv, duv, true)
			e.compareFloor("SwiGLUBackward dgate "+name, e.load(dg, n), dgv, tol(e.dt, false), max(dgFloor, rms(dgv)))
			e.compareFloor("SwiGLUBackward dup "+name, e.load(du, n), duv, tol(e.dt, false), max(duFloor, rms(duv)))

			// Written, not accumulated: dgate and dup start poisoned.
			wg, wu, wgv, wuv := e.out(n), e.out(n), make([]float64, n), make([]float64, n)
			e.check(e.o.SwiGLUBackward(g, u, dout, wg, wu, int64(n), false))
			ref.SwiGLUBackward(gv, uv, dov, wgv, wuv, false)
			e.compare("SwiGLUBackward dgate written "+name, e.load(wg, n), wgv, tol(e.dt, false))
			e.compare("SwiGLUBackward dup written "+name, e.load(wu, n), wuv, tol(e.dt, false))

			// dup null: dgate only.
			dg2, dg2v := e.store(e.normal(n, 1))
			dg2Floor := rms(dg2v)
			e.check(e.o.SwiGLUBackward(g, u, dout, dg2, gpu.Buffer{}, int64(n), true))
			ref.SwiGLUBackward(gv, uv, dov, dg2v, nil, true)
			e.compareFloor("SwiGLUBackward dgate only "+name, e.load(dg2, n), dg2v, tol(e.dt, false), max(dg2Floor, rms(dg2v)))
		}
	})
}

func TestGPUElementwise(t *testing.T) {
	forDTypes(t, func(e *env) {
		for _, n := range []int{1, 7, 1000, 100003} {
			name := fmt.Sprintf("n%d", n)
			x, xv := e.store(e.normal(n, 1))
			y, yv := e.store(e.normal(n, 1))
			sum := e.out(n)
			e.check(e.o.Add(x, y, sum, int64(n)))
			wsum := make([]float64, n)
			ref.Add(xv, yv, wsum)
			e.compare("Add "+name, e.load(sum, n), wsum, tol(e.dt, false))
			e.check(e.o.Axpy(-1.75, x, y, int64(n)))
			ref.Axpy(-1.75, xv, yv)
			e.compare("Axpy "+name, e.load(y, n), yv, tol(e.dt, false))
			e.check(e.o.Scale(0.375, x, int64(n)))
			ref.Scale(0.375, xv)
			e.compare("Scale "+name, e.load(x, n), xv, tol(e.dt, false))
			e.mixedAxpys(name, n)
		}
		for _, c := range []struct{ rows, n int }{{1, 1}, {7, 33}, {33, 7}, {1000, 100}, {5000, 3}, {9, 64}, {5, 40}} {
			name := fmt.Sprintf("rows%d_n%d", c.rows, c.n)
			y, yv := e.store(e.normal(c.rows*c.n, 1))
			v, vv := e.store(e.normal(c.n, 1))
			e.check(e.o.AddRows(y, c.rows, c.n, v))
			ref.AddRows(yv, vv)
			e.compare("AddRows "+name, e.load(y, c.rows*c.n), yv, tol(e.dt, false))
			yv = e.load(y, c.rows*c.n) // SumRows reads the rounded sums
			s, sv := e.f32(e.normal(c.n, 1))
			scratch := e.alloc(ColumnScratch(c.rows, c.n), 0xff)
			e.check(e.o.SumRows(y, c.rows, c.n, s, scratch))
			ref.SumRows(yv, sv)
			e.compare("SumRows "+name, e.loadF32(s, c.n), sv, tolF32Reduce)
		}
	})
}

func TestGPUCopy(t *testing.T) {
	forDTypes(t, func(e *env) {
		for _, c := range []struct{ rows, cols, srcStride, srcOff, dstStride, dstOff int }{
			{1, 1, 1, 0, 1, 0}, {7, 3, 5, 2, 9, 6}, {33, 64, 64, 0, 192, 128}, {1000, 7, 20, 13, 7, 0},
			// The vector path (whole vectors in both dtypes: cols, strides and
			// offsets multiples of 8): one long row, strided rows; then the
			// scalar fallback: odd cols, an odd stride, an odd offset.
			{1, 40000, 40000, 0, 40000, 0}, {16, 128, 136, 8, 384, 256}, {1, 40003, 40003, 0, 40003, 0},
			{16, 128, 137, 8, 384, 256}, {16, 128, 136, 8, 384, 255},
		} {
			name := fmt.Sprintf("%dx%d_src%d+%d_dst%d+%d", c.rows, c.cols, c.srcStride, c.srcOff, c.dstStride, c.dstOff)
			sn, dn := (c.rows-1)*c.srcStride+c.srcOff+c.cols, (c.rows-1)*c.dstStride+c.dstOff+c.cols
			src, sv := e.store(e.normal(sn, 1))
			for _, acc := range []bool{false, true} {
				dst, dv := e.store(e.normal(dn, 1))
				e.check(e.o.Copy2D(c.rows, c.cols, src, c.srcStride, c.srcOff, dst, c.dstStride, c.dstOff, acc))
				ref.Copy2D(c.rows, c.cols, sv, c.srcStride, c.srcOff, dv, c.dstStride, c.dstOff, acc)
				tl := 0.0 // a copy is exact
				if acc {
					tl = tol(e.dt, false)
				}
				e.compare(fmt.Sprintf("Copy2D %s accumulate=%v", name, acc), e.load(dst, dn), dv, tl)
			}
		}
		// nd a multiple of 8 takes the vector path in both dtypes, 12 in fp32
		// only (4 per vector), 7 in neither.
		for _, s := range [][4]int{{1, 1, 1, 1}, {2, 3, 5, 7}, {1, 33, 8, 64}, {4, 17, 3, 128}, {3, 4, 5, 12}, {2, 96, 32, 128}} {
			n := s[0] * s[1] * s[2] * s[3]
			src, sv := e.store(e.normal(n, 1))
			for _, acc := range []bool{false, true} {
				var dst gpu.Buffer
				var dv []float64
				if acc {
					dst, dv = e.store(e.normal(n, 1))
				} else {
					dst, dv = e.out(n), make([]float64, n)
				}
				e.check(e.o.Transpose12(s[0], s[1], s[2], s[3], src, dst, acc))
				ref.Transpose12(s[0], s[1], s[2], s[3], sv, dv, acc)
				tl := 0.0
				if acc {
					tl = tol(e.dt, false)
				}
				e.compare(fmt.Sprintf("Transpose12 %v accumulate=%v", s, acc), e.load(dst, n), dv, tl)
			}
		}
	})
}

func TestGPUSoftmaxXent(t *testing.T) {
	forDTypes(t, func(e *env) {
		for _, c := range []struct{ rows, vocab int }{{1, 1}, {7, 7}, {33, 1000}, {5, 1003}, {3, 32000}, {4, 151936}} {
			name := fmt.Sprintf("rows%d_vocab%d", c.rows, c.vocab)
			n := c.rows * c.vocab
			logits, lv := e.store(e.normal(n, 3))
			targets := make([]int32, c.rows)
			scale := make([]float64, c.rows)
			for r := range targets {
				targets[r] = int32(e.r.IntN(c.vocab))
				if c.rows > 1 && r%3 == 1 {
					targets[r] = -1 // an ignored row
				}
				scale[r] = e.r.Float64() + 0.1
			}
			sb, sv := e.f32(scale)
			loss, amax := e.outF32(c.rows), e.alloc(int64(4*c.rows), 0x7f)
			e.check(e.o.SoftmaxXent(logits, c.rows, c.vocab, e.ints(targets), sb, loss, amax))
			wl, wa := make([]float64, c.rows), make([]int32, c.rows)
			ref.SoftmaxXent(lv, c.rows, c.vocab, targets, sv, wl, wa)
			e.compare("SoftmaxXent loss "+name, e.loadF32(loss, c.rows), wl, tolF32Reduce)
			e.compare("SoftmaxXent gradient "+name, e.load(logits, n), lv, tol(e.dt, true))
			if ga := e.loadI32(amax, c.rows); !slices.Equal(ga, wa) {
				e.t.Errorf("SoftmaxXent argmax %s: got %v, want %v", name, ga, wa)
			}
		}
	})
}

// TestGPUArgmaxRows compares op_argmax_rows with the CPU backend on the
// conformance suite's rows (bf16-exact values with forced ties, ±Inf, NaNs
// and signed zeros; a small vocabulary to Qwen3's 151936), whole buffers
// (the vector loop where rows are whole vectors) and buffers one element
// in (the scalar loop).
func TestGPUArgmaxRows(t *testing.T) {
	forDTypes(t, func(e *env) {
		for _, sh := range backendtest.ArgmaxShapes {
			rows, cols := sh[0], sh[1]
			x, xv := e.store(backendtest.ArgmaxInput(e.r, rows, cols))
			want := make([]int32, rows)
			ref.ArgmaxRows(xv, rows, cols, want)
			es := int64(e.dt.Size())
			for _, off := range []int64{0, 1} {
				v := x
				if off > 0 { // the same rows one element on, after an element of padding
					b, _ := e.store(append(make([]float64, off), xv...))
					v = gpu.Buffer{Ptr: b.Ptr + cuda.DevicePtr(off*es), Size: b.Size - off*es}
				}
				out := e.alloc(int64(4*rows), 0x7f)
				e.check(e.o.ArgmaxRows(v, rows, cols, out))
				if got := e.loadI32(out, rows); !slices.Equal(got, want) {
					e.t.Errorf("ArgmaxRows rows%d_cols%d offset %d: got %v, want %v", rows, cols, off, got, want)
				}
			}
		}
	})
}

// mixedAxpys checks AxpyBy, AxpyToF32, AxpyFromF32 and Fill on n elements:
// the scalar factor read on the device, and additions between storage and
// fp32 buffers (whose fp32 side is held to tolF32).
func (e *env) mixedAxpys(name string, n int) {
	sc, scv := e.f32([]float64{-0.625})
	x, xv := e.store(e.normal(n, 1))
	y, yv := e.store(e.normal(n, 1))
	e.check(e.o.AxpyBy(1.5, sc, x, y, int64(n)))
	ref.Axpy(1.5*scv[0], xv, yv)
	e.compare("AxpyBy "+name, e.load(y, n), yv, tol(e.dt, false))
	yv = e.load(y, n) // the next references start from y as stored (rounded)

	f, fv := e.f32(e.normal(n, 1))
	e.check(e.o.AxpyToF32(0.75, sc, x, f, int64(n)))
	ref.Axpy(0.75*scv[0], xv, fv)
	e.compare("AxpyToF32 "+name, e.loadF32(f, n), fv, tolF32)
	e.check(e.o.AxpyToF32(2, gpu.Buffer{}, x, f, int64(n)))
	ref.Axpy(2, xv, fv)
	e.compare("AxpyToF32 no scalar "+name, e.loadF32(f, n), fv, tolF32)
	fv = e.loadF32(f, n)

	e.check(e.o.AxpyFromF32(-1.25, gpu.Buffer{}, f, y, int64(n)))
	ref.Axpy(-1.25, fv, yv)
	e.compare("AxpyFromF32 "+name, e.load(y, n), yv, tol(e.dt, false))

	e.check(e.o.Fill(y, 2.75, int64(n))) // 2.75 is exact in bf16
	want := make([]float64, n)
	for i := range want {
		want[i] = 2.75
	}
	e.compare("Fill "+name, e.load(y, n), want, 0)
}
