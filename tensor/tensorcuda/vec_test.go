package tensorcuda

import (
	"fmt"
	"math"
	"testing"

	"dflash/cuda"
	"dflash/gpu"
)

// The elementwise kernels take 16 bytes per access when their pointers are
// aligned (and rows are whole vectors), with a scalar loop for the tail.
// The other GPU tests' sizes run both loops (n = 1000 has no tail, 7 and
// 100003 have one; dims of 64 and 4096 take the vector loop, 7 and 100 the
// scalar one). TestGPUMisaligned runs each vectorised kernel on buffers that
// start one element past an allocation, so the alignment check must send
// everything through the scalar loop.
func TestGPUMisaligned(t *testing.T) {
	forDTypes(t, func(e *env) {
		tl := tol(e.dt, false)
		for _, n := range []int{8, 1000, 4099} {
			name := fmt.Sprintf("n%d", n)
			x, xv := e.storeAt1(e.normal(n, 1))
			y, yv := e.storeAt1(e.normal(n, 1))
			e.check(e.o.Axpy(0.5, x, y, int64(n)))
			ref.Axpy(0.5, xv, yv)
			e.compare("Axpy misaligned "+name, e.load(y, n), yv, tl)
			e.check(e.o.Scale(-2, x, int64(n)))
			ref.Scale(-2, xv)
			e.compare("Scale misaligned "+name, e.load(x, n), xv, tl)

			g, gv := e.storeAt1(e.normal(n, 3))
			u, uv := e.store(e.normal(n, 1)) // one aligned input is not enough
			out := e.shifted(e.out(n + 1))
			e.check(e.o.SwiGLU(g, u, out, int64(n)))
			want := make([]float64, n)
			ref.SwiGLU(gv, uv, want)
			e.compare("SwiGLU misaligned "+name, e.load(out, n), want, tl)
			dout, dov := e.store(e.normal(n, 1))
			dg, dgv := e.store(e.normal(n, 1))
			du, duv := e.storeAt1(e.normal(n, 1))
			e.check(e.o.SwiGLUBackward(g, u, dout, dg, du, int64(n), true))
			ref.SwiGLUBackward(gv, uv, dov, dgv, duv, true)
			e.compare("SwiGLUBackward misaligned dgate "+name, e.load(dg, n), dgv, tl)
			e.compare("SwiGLUBackward misaligned dup "+name, e.load(du, n), duv, tl)
		}

		const rows, dim = 9, 64
		y, yv := e.storeAt1(e.normal(rows*dim, 1))
		v, vv := e.store(e.normal(dim, 1))
		e.check(e.o.AddRows(y, rows, dim, v))
		ref.AddRows(yv, vv)
		e.compare("AddRows misaligned", e.load(y, rows*dim), yv, tl)

		for _, dim := range []int{dim, 2048} { // the _small kernels, one block per row
			name := fmt.Sprintf("dim%d", dim)
			x, xv := e.storeAt1(e.normal(rows*dim, 2))
			w, wv := e.store(e.normal(dim, 1))
			out, rstd := e.out(rows*dim), e.outF32(rows)
			e.check(e.o.RMSNorm(x, w, rows, dim, 1e-6, out, rstd))
			wy, wr := make([]float64, rows*dim), make([]float64, rows)
			ref.RMSNorm(xv, wv, dim, 1e-6, wy, wr)
			e.compare("RMSNorm misaligned y "+name, e.load(out, rows*dim), wy, tol(e.dt, true))
			gr := e.loadF32(rstd, rows)
			dy, dyv := e.store(e.normal(rows*dim, 1))
			dx, dxv := e.storeAt1(e.normal(rows*dim, 1))
			dw, dwv := e.f32(e.normal(dim, 1))
			scratch := e.alloc(ColumnScratch(rows, dim), 0xff)
			// Misaligned x: the dx kernels' scalar loops and the dw kernel's scalar path, not the fused kernel.
			e.check(e.o.RMSNormBackward(x, w, rstd, dy, rows, dim, dx, dw, scratch, true))
			ref.RMSNormBackward(xv, wv, gr, dyv, dim, dxv, dwv, true)
			e.compare("RMSNormBackward misaligned dx "+name, e.load(dx, rows*dim), dxv, tol(e.dt, true))
			e.compare("RMSNormBackward misaligned dw "+name, e.loadF32(dw, dim), dwv, tolF32Reduce)
		}

		for _, acc := range []bool{false, true} {
			// Whole vectors, but one element past alignment: the scalar path.
			const n = 4 * 8 * 5 * 16
			src, sv := e.storeAt1(e.normal(n, 1))
			dst, dv := e.storeAt1(e.normal(n, 1))
			e.check(e.o.Copy2D(1, n, src, n, 0, dst, n, 0, acc))
			ref.Copy2D(1, n, sv, n, 0, dv, n, 0, acc)
			e.compare(fmt.Sprintf("Copy2D misaligned accumulate=%v", acc), e.load(dst, n), dv, tl)
			dv = e.load(dst, n) // the transpose adds to dst as stored (rounded)
			e.check(e.o.Transpose12(4, 8, 5, 16, src, dst, acc))
			ref.Transpose12(4, 8, 5, 16, sv, dv, acc)
			e.compare(fmt.Sprintf("Transpose12 misaligned accumulate=%v", acc), e.load(dst, n), dv, tl)
		}

		const heads, hd = 3, 32
		ang := e.normal(rows*hd/2, 3)
		cs, sn := make([]float64, len(ang)), make([]float64, len(ang))
		for i, a := range ang {
			cs[i], sn[i] = math.Cos(a), math.Sin(a)
		}
		cb, cv := e.f32(cs)
		sb, sv := e.f32(sn)
		rx, rxv := e.storeAt1(e.normal(rows*heads*hd, 1))
		ry := e.out(rows * heads * hd)
		e.check(e.o.RoPE(rx, rows, heads, hd, cb, sb, ry, false, false))
		want := make([]float64, rows*heads*hd)
		ref.RoPE(rxv, heads, hd, cv, sv, want, false, false)
		e.compare("RoPE misaligned", e.load(ry, rows*heads*hd), want, tl)
	})
}

// storeAt1 uploads x in storage dtype one element past the start of an
// allocation (misaligned for 16-byte access) and returns that buffer and
// the values it holds.
func (e *env) storeAt1(x []float64) (gpu.Buffer, []float64) {
	b, held := e.store(append([]float64{0}, x...))
	return e.shifted(b), held[1:]
}

// shifted returns b less its first storage element.
func (e *env) shifted(b gpu.Buffer) gpu.Buffer {
	es := int64(e.dt.Size())
	return gpu.Buffer{Ptr: b.Ptr + cuda.DevicePtr(es), Size: b.Size - es}
}
