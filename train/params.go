package train

import (
	"fmt"
	"math"
	"strings"

	"dflash/tensor"
)

// Params is a run's trainable parameters where they live: the parameter
// arena, the backend that holds it (the CPU, or a device it was placed on
// with master values), and AdamW's state there. Run zeroes, scales, clips
// and updates the arena's flat gradient through it, and checkpoints read
// and write the values and moments through it; every operation is one of
// the backend's (tensor.Optimizer, Fill, Scale, Download, AllocHost), so one
// Params serves every backend. Only GradNorm (and ClipGradNorm) and a
// checkpoint's snapshot wait for a device.
type Params struct {
	b     tensor.Backend[float32]
	a     *tensor.Arena[float32]
	state *tensor.AdamState[float32]
}

// NewParams returns the parameters of arena a on backend b with zero AdamW
// state of hyper-parameters h; it allocates the arena's gradient when it
// has none. Weight decay follows NoDecay on each parameter's name and
// shape. It returns an error when a is not placed on b with master values.
func NewParams(b tensor.Backend[float32], a *tensor.Arena[float32], h tensor.AdamW) (*Params, error) {
	checkNames(a)
	a.EnsureGrad()
	ps := a.Params()
	decay := make([]bool, len(ps))
	for i, p := range ps {
		decay[i] = h.WeightDecay != 0 && !NoDecay(p.Name, p.Shape)
	}
	st, err := b.NewAdamState(a, h, decay)
	if err != nil {
		return nil, err
	}
	return &Params{b: b, a: a, state: st}, nil
}

// checkNames panics unless the arena's parameter names are unique and not
// empty (checkpoints key tensors by them).
func checkNames(a *tensor.Arena[float32]) {
	seen := map[string]bool{}
	for _, p := range a.Params() {
		if p.Name == "" {
			panic("train: parameter with an empty name")
		}
		if seen[p.Name] {
			panic(fmt.Sprintf("train: parameter %q appears twice", p.Name))
		}
		seen[p.Name] = true
	}
}

// NoDecay reports whether the parameter of that name and shape takes no
// weight decay: a scalar or vector (biases, norm scales), a name ending in
// "bias", or a name containing "norm" (any case; RMSNorm/LayerNorm weights).
func NoDecay(name string, shape []int) bool {
	name = strings.ToLower(name)
	return len(shape) <= 1 || strings.HasSuffix(name, "bias") || strings.Contains(name, "norm")
}

// Arena returns the parameter arena.
func (p *Params) Arena() *tensor.Arena[float32] { return p.a }

// Decays reports whether parameter i (in the arena's order) takes weight
// decay.
func (p *Params) Decays(i int) bool { return p.state.Decay[i] }

// Steps returns the number of updates applied.
func (p *Params) Steps() int64 { return p.state.Steps }

// ZeroGrad sets the flat gradient to zero.
func (p *Params) ZeroGrad() { p.b.Fill(p.a.Grad, 0) }

// ScaleGrad multiplies the flat gradient by s.
func (p *Params) ScaleGrad(s float32) { p.b.Scale(s, p.a.Grad) }

// GradNorm returns the global L2 norm of the gradient,
// sqrt(Σ_i g_i²) summed in float64 (waiting for a device).
func (p *Params) GradNorm() float64 { return math.Sqrt(p.b.SumSquares(p.a.Grad)) }

// ClipGradNorm scales the gradient by min(1, maxNorm/(norm+1e-6)), where
// norm is its global L2 norm, and returns that norm (before clipping).
// maxNorm <= 0 only measures; a non-finite norm is returned and nothing is
// scaled.
func (p *Params) ClipGradNorm(maxNorm float64) float64 {
	norm := p.GradNorm()
	if c, ok := clipScale(norm, maxNorm); ok {
		p.ScaleGrad(c)
	}
	return norm
}

// clipScale returns the factor min(1, maxNorm/(norm+1e-6)) by which
// ClipGradNorm scales gradients of global norm norm, and whether it scales
// them at all: not when maxNorm <= 0, the norm is not finite or the factor
// is not below 1.
func clipScale(norm, maxNorm float64) (float32, bool) {
	if maxNorm <= 0 || math.IsNaN(norm) || math.IsInf(norm, 0) {
		return 1, false
	}
	c := maxNorm / (norm + 1e-6)
	return float32(c), c < 1
}

// Step applies one AdamW update with learning rate lr to every parameter
// (tensor.Optimizer.AdamWStep).
func (p *Params) Step(lr float64) { p.b.AdamWStep(p.a, p.state, lr) }

// GradRange returns elements [lo, hi) of the flat gradient, for a
// Collective: tensor.Host[float32] on the CPU, the backend's storage on a
// device.
func (p *Params) GradRange(lo, hi int) Buffer {
	if lo < 0 || hi > p.a.Len() || lo > hi {
		panic(fmt.Sprintf("train: gradient range [%d, %d) outside [0, %d)", lo, hi, p.a.Len()))
	}
	return p.a.Grad.Slice(lo, hi)
}
