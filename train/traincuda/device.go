package traincuda

import (
	"fmt"
	"math"

	"dflash/tensor"
	"dflash/tensor/tensorcuda"
	"dflash/train"
)

// Device is train.Device for a model whose parameter arena is placed on a
// tensorcuda.Backend with master values: zeroing, scaling and clipping the
// fp32 flat gradient, the fused AdamW, and the copies of values, moments
// and step count to and from a run's host mirrors around checkpoints. Only
// ClipGradNorm (the norm is read back) and Pull wait for the device.
type Device struct {
	b    *tensorcuda.Backend
	a    *tensor.Arena[float32]
	cfg  train.AdamWConfig
	opt  *tensorcuda.AdamW
	step int64 // updates applied
}

var (
	_ train.Device     = (*Device)(nil)
	_ train.GradRanger = (*Device)(nil)
)

// NewDevice returns the train.Device of arena a, placed on b with master
// values, with AdamW of cfg. Weight decay follows cfg.NoDecay (nil:
// train.DefaultNoDecay) on each parameter's name and shape, as train.AdamW
// decides it.
func NewDevice(b *tensorcuda.Backend, a *tensor.Arena[float32], cfg train.AdamWConfig) (*Device, error) {
	noDecay := cfg.NoDecay
	if noDecay == nil {
		noDecay = train.DefaultNoDecay
	}
	decay := func(name string, shape []int) bool {
		return cfg.WeightDecay != 0 && !noDecay(&train.Param{Name: name, Shape: shape})
	}
	opt, err := tensorcuda.NewAdamW(b, a, decay)
	if err != nil {
		return nil, err
	}
	return &Device{b: b, a: a, cfg: cfg, opt: opt}, nil
}

// ZeroGrads sets the flat gradient to zero.
func (t *Device) ZeroGrads() { t.b.Fill(t.a.Grad, 0) }

// ScaleGrads multiplies the flat gradient by s.
func (t *Device) ScaleGrads(s float32) { t.b.Scale(s, t.a.Grad) }

// GradNorm returns the global L2 norm of the gradient, summed in float64
// (waiting for the device).
func (t *Device) GradNorm() float64 { return math.Sqrt(t.b.SumSquares(t.a.Grad)) }

// ClipGradNorm scales the gradient as train.ClipGradNorm does (by
// train.ClipScale) and returns the norm before clipping.
func (t *Device) ClipGradNorm(maxNorm float64) float64 {
	norm := t.GradNorm()
	if c, ok := train.ClipScale(norm, maxNorm); ok {
		t.ScaleGrads(c)
	}
	return norm
}

// Step applies one AdamW update with learning rate lr (and refreshes the
// bf16 compute copy), with train.AdamW's scalars for this update count.
func (t *Device) Step(lr float64) {
	t.step++
	c := t.cfg
	stepSize, bc2Sqrt, shrink := train.AdamWScalars(c, lr, t.step)
	t.opt.Step(tensorcuda.AdamWStep{Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, StepSize: stepSize, BC2Sqrt: bc2Sqrt, Shrink: shrink})
}

// GradRange returns elements [lo, hi) of the flat fp32 gradient
// (train.GradRanger), for NCCLCollective.
func (t *Device) GradRange(lo, hi int) train.Buffer { return t.a.Grad.Slice(lo, hi) }

// check returns an error unless params mirror the arena's parameters, in
// order, and opt is laid out alike.
func (t *Device) check(params []*train.Param, opt *train.AdamW) error {
	ps := t.a.Params()
	if len(params) != len(ps) {
		return fmt.Errorf("traincuda: %d host parameters for an arena of %d", len(params), len(ps))
	}
	for i, p := range ps {
		if params[i].Name != p.Name || params[i].Numel() != p.Numel() || len(params[i].Data) != p.Numel() {
			return fmt.Errorf("traincuda: host parameter %d is %s%v, the arena's %v", i, params[i].Name, params[i].Shape, p)
		}
	}
	if m, _, _ := opt.State(); len(m) != t.a.Len() {
		return fmt.Errorf("traincuda: host optimizer of %d elements for an arena of %d", len(m), t.a.Len())
	}
	return nil
}

// Pull copies the master values, the moments and the step count into the
// host mirrors params (the arena's parameters, in order) and opt.
func (t *Device) Pull(params []*train.Param, opt *train.AdamW) error {
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
		steps[i] = t.step
	}
	return nil
}

// Push copies params and opt to the device: master values, the bf16
// compute copy made from them, the moments and the step count (every
// parameter's must agree: the device keeps one).
func (t *Device) Push(params []*train.Param, opt *train.AdamW) error {
	if err := t.check(params, opt); err != nil {
		return err
	}
	m, v, steps := opt.State()
	for _, s := range steps {
		if s != steps[0] {
			return fmt.Errorf("traincuda: the optimizer's step counts differ between parameters (%d and %d); the device keeps one", steps[0], s)
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
		t.b.WriteParams(w.dst, w.src)
	}
	if len(steps) > 0 {
		t.step = steps[0]
	}
	return nil
}
