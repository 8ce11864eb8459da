package tensorcuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/checkreport"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
	"dflash/tensor"
)

// GPU tests (names with GPU) run on the GPU machine as a compiled test binary
// (scripts/gpu-ops.sh); here they skip with a message naming what is missing.
// Each compares a kernel with the float64 CPU backend on inputs rounded to
// the storage dtype first, so that the tolerance covers only the kernel's
// fp32 arithmetic and the rounding of its outputs.

func TestMain(m *testing.M) { gputest.Main(m) }

// uploadRounded returns x as bf16 storage on b and the values it holds (x
// rounded to bf16), for a float64 reference on what the kernel reads.
func uploadRounded(b *Backend, x []float32) (tensor.Storage[float32], []float32) {
	s := b.Upload(x, false)
	r := make([]float32, len(x))
	b.Download(s, r)
	return s, r
}

// normals returns n standard normal draws of rng.
func normals(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// ref is the reference: the CPU backend in float64, on host slices.
var ref = hostRef{tensor.NewCPU[float64](0)}

// hostRef calls the CPU backend's kernels on Go slices (a nil slice is a
// nil Storage: an output that is not computed).
type hostRef struct{ c *tensor.CPU[float64] }

// h wraps x as host storage, nil as a nil Storage.
func h(x []float64) tensor.Storage[float64] {
	if x == nil {
		return nil
	}
	return tensor.Host[float64](x)
}

func (r hostRef) Gemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	r.c.Gemm(transA, transB, m, n, k, alpha, h(a), lda, h(b), ldb, beta, h(c), ldc)
}
func (r hostRef) Gather(table []float64, dim int, ids []int32, out []float64) {
	r.c.Gather(h(table), dim, tensor.HostInts(ids), h(out))
}
func (r hostRef) ScatterAdd(dout []float64, dim int, ids []int32, dtable []float64) {
	r.c.ScatterAdd(h(dout), dim, tensor.HostInts(ids), h(dtable))
}
func (r hostRef) RMSNorm(x, w []float64, dim int, eps float64, y, rstd []float64) {
	r.c.RMSNorm(h(x), h(w), dim, eps, h(y), h(rstd))
}
func (r hostRef) RMSNormBackward(x, w, rstd, dy []float64, dim int, dx, dw []float64, accumulate bool) {
	r.c.RMSNormBackward(h(x), h(w), h(rstd), h(dy), dim, h(dx), h(dw), accumulate)
}
func (r hostRef) RoPE(x []float64, heads, headDim int, cos, sin, y []float64, inverse, accumulate bool) {
	r.c.RoPE(h(x), heads, headDim, h(cos), h(sin), h(y), inverse, accumulate)
}
func (r hostRef) NormRoPE(x, w []float64, batch, length, heads, headDim, xStride int, eps float64, cos, sin, y, rstd []float64) {
	r.c.NormRoPE(h(x), h(w), batch, length, heads, headDim, xStride, eps, h(cos), h(sin), h(y), h(rstd))
}
func (r hostRef) NormRoPEBackward(x, w, rstd, dy []float64, batch, length, heads, headDim, xStride int, cos, sin, dx, dw []float64, accumulate bool) {
	r.c.NormRoPEBackward(h(x), h(w), h(rstd), h(dy), batch, length, heads, headDim, xStride, h(cos), h(sin), h(dx), h(dw), accumulate)
}
func (r hostRef) Add(a, b, out []float64)        { r.c.Add(h(a), h(b), h(out)) }
func (r hostRef) SwiGLU(gate, up, out []float64) { r.c.SwiGLU(h(gate), h(up), h(out)) }
func (r hostRef) SwiGLUBackward(gate, up, dout, dgate, dup []float64, accumulate bool) {
	r.c.SwiGLUBackward(h(gate), h(up), h(dout), h(dgate), h(dup), accumulate)
}
func (r hostRef) Axpy(alpha float64, x, y []float64) { r.c.Axpy(alpha, h(x), h(y)) }
func (r hostRef) Scale(alpha float64, x []float64)   { r.c.Scale(alpha, h(x)) }
func (r hostRef) AddRows(y, v []float64)             { r.c.AddRows(h(y), h(v)) }
func (r hostRef) SumRows(y, v []float64)             { r.c.SumRows(h(y), h(v)) }
func (r hostRef) Copy2D(rows, cols int, src []float64, srcStride, srcOff int, dst []float64, dstStride, dstOff int, accumulate bool) {
	r.c.Copy2D(rows, cols, h(src), srcStride, srcOff, h(dst), dstStride, dstOff, accumulate)
}
func (r hostRef) Transpose12(a, b, c, d int, src, dst []float64, accumulate bool) {
	r.c.Transpose12(a, b, c, d, h(src), h(dst), accumulate)
}
func (r hostRef) ArgmaxRows(x []float64, rows, cols int, out []int32) {
	r.c.ArgmaxRows(h(x), rows, cols, tensor.HostInts(out))
}
func (r hostRef) SoftmaxXent(logits []float64, rows, vocab int, targets []int32, scale, loss []float64, argmax []int32) {
	r.c.SoftmaxXent(h(logits), rows, vocab, tensor.HostInts(targets), h(scale), h(loss), tensor.HostInts(argmax))
}

// Tolerances, relative to max(|want|, rms(want)) per element.
const (
	tolF32       = 1e-5 // fp32 storage, elementwise ops
	tolF32Reduce = 3e-5 // fp32 results of sums over a row or a column (dx, dw, SumRows, loss)
	tolBF16      = 1e-2 // bf16 storage: one rounding of the output (2⁻⁹) plus fp32 arithmetic
)

// tol returns the tolerance of outputs in storage dtype dt.
func tol(dt dtype.DType, reduce bool) float64 {
	switch {
	case dt == dtype.BF16:
		return tolBF16
	case reduce:
		return tolF32Reduce
	}
	return tolF32
}

// fatal carries an error out of a function run on the worker thread, where
// t.Fatal must not be called.
type fatal struct{ err error }

// env is one test's device, ops and inputs; its methods run on the worker.
type env struct {
	t    *testing.T
	d    *gpu.Device
	o    *Ops
	dt   dtype.DType
	r    *rand.Rand
	bufs []gpu.Buffer
}

// forDTypes runs f for bf16 and fp32 storage on GPU 0 with the shared
// memory-only NVRTC cache, or skips when there is no GPU or NVRTC.
func forDTypes(t *testing.T, f func(e *env)) {
	w, cache := gputest.Worker0Cache(t)
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			seed := testseed.Seed(t)
			err := w.Run(func(d *gpu.Device) (err error) {
				o, err := New(cache, d, dt)
				if err != nil {
					return err
				}
				if err := o.Warm(context.Background()); err != nil {
					return err
				}
				e := &env{t: t, d: d, o: o, dt: dt, r: rand.New(rand.NewPCG(seed, seed^0x5eed))}
				defer e.free()
				defer func() {
					if r := recover(); r != nil {
						f, ok := r.(fatal)
						if !ok {
							panic(r)
						}
						err = f.err
					}
				}()
				f(e)
				return e.check(d.Synchronize())
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// check turns a CUDA error into a test failure (on the worker thread).
func (e *env) check(err error) error {
	if err != nil {
		panic(fatal{err})
	}
	return nil
}

func (e *env) free() {
	for _, b := range e.bufs {
		e.d.Free(b)
	}
	e.bufs = nil
}

// keep records b for free and returns it.
func (e *env) keep(b gpu.Buffer, err error) gpu.Buffer {
	e.check(err)
	e.bufs = append(e.bufs, b)
	return b
}

// alloc returns n bytes filled with byte v (gputest.Poison: NaN in bf16 and
// fp32).
func (e *env) alloc(n int64, v byte) gpu.Buffer {
	b := e.keep(gputest.Alloc(e.d, n))
	if v != gputest.Poison {
		e.check(e.d.Memset(b, v, nil))
	}
	return b
}

// normal returns n values N(0, s²).
func (e *env) normal(n int, s float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = e.r.NormFloat64() * s
	}
	return x
}

// store uploads x in storage dtype and returns the buffer and the values the
// device holds.
func (e *env) store(x []float64) (gpu.Buffer, []float64) { return e.upload(e.dt, x) }

// f32 uploads x as fp32.
func (e *env) f32(x []float64) (gpu.Buffer, []float64) { return e.upload(dtype.F32, x) }

func (e *env) upload(dt dtype.DType, x []float64) (gpu.Buffer, []float64) {
	b, held, err := gputest.Upload(e.d, dt, x)
	return e.keep(b, err), held
}

func (e *env) ints(x []int32) gpu.Buffer {
	b := e.alloc(int64(4*len(x)), 0)
	e.check(gpu.Upload(e.d, b, x))
	return b
}

// out returns a NaN-poisoned buffer of n storage elements; outF32 of n fp32.
func (e *env) out(n int) gpu.Buffer    { return e.alloc(int64(n)*int64(e.dt.Size()), gputest.Poison) }
func (e *env) outF32(n int) gpu.Buffer { return e.alloc(int64(n)*4, gputest.Poison) }

// load downloads n storage elements; loadF32 n fp32 values.
func (e *env) load(b gpu.Buffer, n int) []float64 { return e.download(e.dt, b, n) }
func (e *env) loadF32(b gpu.Buffer, n int) []float64 {
	return e.download(dtype.F32, b, n)
}

func (e *env) download(dt dtype.DType, b gpu.Buffer, n int) []float64 {
	x, err := gputest.Download(e.d, dt, b, n)
	e.check(err)
	return x
}

func (e *env) loadI32(b gpu.Buffer, n int) []int32 {
	x := make([]int32, n)
	e.check(gpu.Download(e.d, x, b))
	return x
}

// compare fails the test when an element of got is NaN where want is not
// (not written) or differs from want by more than tol relative to
// max(|want|, rms(want)); it logs and reports the largest error.
func (e *env) compare(what string, got, want []float64, tol float64) {
	e.t.Helper()
	e.compareFloor(what, got, want, tol, rms(want))
}

// rms returns the root mean square of v (1 for none or all zero).
func rms(v []float64) float64 {
	var ss float64
	for _, w := range v {
		ss += w * w
	}
	if ss == 0 {
		return 1
	}
	return math.Sqrt(ss / float64(len(v)))
}

// compareFloor is compare with errors relative to max(|want|, floor): for a
// result that cancels to about zero, floor is the scale of its terms.
func (e *env) compareFloor(what string, got, want []float64, tol, floor float64) {
	e.t.Helper()
	worst, at := 0.0, -1
	for i, w := range want {
		g := got[i]
		if math.IsNaN(g) && !math.IsNaN(w) {
			e.t.Errorf("%s: element %d of %d not written (NaN), want %g", what, i, len(want), w)
			return
		}
		if err := math.Abs(g-w) / max(math.Abs(w), floor); err > worst {
			worst, at = err, i
		}
	}
	pass := worst <= tol
	detail := fmt.Sprintf("%d elements, max rel err %.3g (tol %.0e)", len(want), worst, tol)
	if !pass {
		e.t.Errorf("%s: element %d: got %g, want %g: %s", what, at, got[at], want[at], detail)
	}
	checkreport.Write(e.t, "tensorcuda", e.dt.String()+" "+what, pass, detail, map[string]float64{"max_rel_err": worst})
}
