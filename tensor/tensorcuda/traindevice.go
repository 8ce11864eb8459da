package tensorcuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/tensor"
	"dflash/train"
)

// SumSquares queues partial[b] = Σ x[i]² (fp64) over block b's share of the
// n fp32 elements of x and returns the number of blocks; partial must hold
// MaxSumBlocks float64 values.
func (o *Ops) SumSquares(x gpu.Buffer, n int64, partial gpu.Buffer) (int, error) {
	need("SumSquares", "x", x, n, 4)
	need("SumSquares", "partial", partial, int64(o.MaxSumBlocks()), 8)
	if n == 0 {
		return 0, nil
	}
	grid := o.strided(n)
	return int(grid.X), o.launch(o.begin(kSumSq).ptr("x", x).i64("n", n).ptr("partial", partial), grid, threads)
}

// MaxSumBlocks is the most blocks SumSquares launches.
func (o *Ops) MaxSumBlocks() int { return max(o.sms, 1) * wavesPerSM }

// TrainDevice is train.Device for a model whose parameter arena is placed
// on a Backend with master values: zeroing, scaling and clipping the fp32
// flat gradient, the fused AdamW, and the copies of values, moments and
// step count to and from a run's host mirrors around checkpoints. Only
// ClipGradNorm (the norm is read back) and Pull wait for the device.
type TrainDevice struct {
	b       *Backend
	a       *tensor.Arena[float32]
	opt     *AdamW
	grad    Buf
	partial gpu.Buffer
}

var _ train.Device = (*TrainDevice)(nil)

// NewTrainDevice returns the train.Device of arena a, placed on b with
// master values, with AdamW of cfg.
func NewTrainDevice(b *Backend, a *tensor.Arena[float32], cfg train.AdamWConfig) (*TrainDevice, error) {
	opt, err := NewAdamW(b, a, cfg)
	if err != nil {
		return nil, err
	}
	return &TrainDevice{b: b, a: a, opt: opt, grad: b.buf(a.Grad, "gradient"),
		partial: b.alloc(int64(8*b.f32.MaxSumBlocks()), true, false)}, nil
}

// ZeroGrads sets the flat gradient to zero.
func (t *TrainDevice) ZeroGrads() { t.b.Fill(t.grad, 0) }

// ScaleGrads multiplies the flat gradient by s.
func (t *TrainDevice) ScaleGrads(s float32) { t.b.Scale(s, t.grad) }

// GradNorm returns the global L2 norm of the gradient, summed in float64
// (waiting for the device).
func (t *TrainDevice) GradNorm() float64 {
	end := t.b.span("GradNorm (sum of squares)", 0, t.grad.n)
	nb, err := t.b.f32.SumSquares(t.grad.Buffer(), int64(t.grad.n), t.partial)
	must("GradNorm", err)
	end()
	if nb == 0 {
		return 0
	}
	raw := make([]byte, 8*nb)
	must("GradNorm", t.b.mem.download(raw, gpu.Buffer{Ptr: t.partial.Ptr, Size: int64(len(raw))}))
	var s float64
	for i := range nb {
		s += math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return math.Sqrt(s)
}

// ClipGradNorm scales the gradient by min(1, maxNorm/(norm+1e-6)) as
// train.ClipGradNorm does and returns the norm before clipping.
func (t *TrainDevice) ClipGradNorm(maxNorm float64) float64 {
	norm := t.GradNorm()
	if maxNorm <= 0 || math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm
	}
	if c := maxNorm / (norm + 1e-6); c < 1 {
		t.ScaleGrads(float32(c))
	}
	return norm
}

// Step applies one AdamW update (and refreshes the bf16 compute copy).
func (t *TrainDevice) Step(lr float64) {
	defer t.b.span("AdamW", 0, t.grad.n)()
	t.opt.Step(lr)
}

// check returns an error unless params mirror the arena's parameters, in
// order, and opt is laid out alike.
func (t *TrainDevice) check(params []*train.Param, opt *train.AdamW) error {
	ps := t.a.Params()
	if len(params) != len(ps) {
		return fmt.Errorf("tensorcuda: %d host parameters for an arena of %d", len(params), len(ps))
	}
	for i, p := range ps {
		if params[i].Name != p.Name || params[i].Numel() != p.Numel() || len(params[i].Data) != p.Numel() {
			return fmt.Errorf("tensorcuda: host parameter %d is %s%v, the arena's %v", i, params[i].Name, params[i].Shape, p)
		}
	}
	if m, _, _ := opt.State(); len(m) != t.a.Len() {
		return fmt.Errorf("tensorcuda: host optimizer of %d elements for an arena of %d", len(m), t.a.Len())
	}
	return nil
}

// Pull copies the master values, the moments and the step count into the
// host mirrors params (the arena's parameters, in order) and opt.
func (t *TrainDevice) Pull(params []*train.Param, opt *train.AdamW) error {
	if err := t.check(params, opt); err != nil {
		return err
	}
	vals := make([]float32, t.a.Len())
	t.b.Download(t.a.Values, vals)
	for i, p := range params {
		copy(p.Data, vals[t.a.Offset(i):])
	}
	m, v, steps := opt.State()
	dm, dv := t.opt.Moments()
	t.b.Download(dm, m)
	t.b.Download(dv, v)
	for i := range steps {
		steps[i] = t.opt.step
	}
	return nil
}

// Push copies params and opt to the device: master values, the bf16
// compute copy made from them, the moments and the step count (every
// parameter's must agree: the device keeps one).
func (t *TrainDevice) Push(params []*train.Param, opt *train.AdamW) error {
	if err := t.check(params, opt); err != nil {
		return err
	}
	m, v, steps := opt.State()
	for _, s := range steps {
		if s != steps[0] {
			return fmt.Errorf("tensorcuda: the optimizer's step counts differ between parameters (%d and %d); the device keeps one", steps[0], s)
		}
	}
	vals := make([]float32, t.a.Len())
	for i, p := range params {
		copy(vals[t.a.Offset(i):], p.Data)
	}
	dm, dv := t.opt.Moments()
	for _, w := range []struct {
		dst tensor.Storage[float32]
		src []float32
	}{{t.a.Values, vals}, {t.a.Compute, vals}, {dm, m}, {dv, v}} {
		t.b.write(t.b.buf(w.dst, "Push"), w.src)
	}
	if len(steps) > 0 {
		t.opt.step = steps[0]
	}
	return nil
}

// write copies x into dst (len(x) = dst.n), rounded to dst's dtype.
func (b *Backend) write(dst Buf, x []float32) {
	checkLen("write", len(x), dst.n)
	if dst.n == 0 {
		return
	}
	raw := make([]byte, dst.n*dst.dt.Size())
	dtype.EncodeFloat32(dst.dt, raw, x)
	must("write", b.mem.upload(dst.Buffer(), raw))
}
