package tensor

import "math"

// Optimizer is the part of Backend that trains a parameter arena placed on
// it with master values (Arena.Place(b, true); on the CPU, Alloc) and
// holding its gradient (Arena.EnsureGrad): AdamW's state and update over
// the arena's flat buffers, and the sum of squares that a gradient's norm
// is. Zeroing and scaling a gradient are Fill and Scale on Arena.Grad.
type Optimizer[T Float] interface {
	// NewAdamState returns AdamW state for arena a with hyper-parameters
	// h: zero moments laid out like a.Values, on this backend, and no step
	// taken; decay[i] reports whether parameter i of a (in declaration
	// order) takes weight decay. It returns an error when a is not placed
	// here with master values.
	NewAdamState(a *Arena[T], h AdamW, decay []bool) (*AdamState[T], error)
	// AdamWStep counts one more step in s and applies AdamW's update with
	// learning rate lr to every parameter of a, from a.Grad. For
	// parameter p with gradient g at its t-th step (s.Steps after the
	// count), with the scalars of AdamW.Scalars:
	//
	//	m <- β1·m + (1−β1)·g
	//	v <- β2·v + (1−β2)·g²
	//	p <- p·shrink − stepSize·m / (√v/bc2Sqrt + eps)   (shrink 1 without decay)
	//
	// computed in float64 from the stored m, v and p, each rounded to its
	// storage after its update. A compute copy of the values that is not
	// the values (CUDA's bf16) is refreshed from them in the same pass.
	AdamWStep(a *Arena[T], s *AdamState[T], lr float64)
	// WriteAdamState copies host moments m and v (laid out like s.M and
	// s.V) into s, for a resumed run.
	WriteAdamState(s *AdamState[T], m, v []T)
	// SumSquares returns Σ x[i]² over s, summed in float64 (the squared L2
	// norm of a flat gradient), waiting for the queued work on a device.
	SumSquares(s Storage[T]) float64
}

// AdamW holds the hyper-parameters of AdamW, Adam with decoupled weight
// decay (Loshchilov & Hutter) as torch.optim.AdamW computes it: the decay
// rates of the moments, the denominator's epsilon and the weight decay.
// The learning rate is given per step.
type AdamW struct {
	Beta1       float64 `json:"beta1"`
	Beta2       float64 `json:"beta2"`
	Eps         float64 `json:"eps"`
	WeightDecay float64 `json:"weight_decay"`
}

// Scalars returns the per-step scalars of the update at step t (counted
// from 1) with learning rate lr: the step size lr/(1−β1^t), √(1−β2^t), and
// the decoupled weight-decay factor 1−lr·λ of the parameters that decay.
// Every backend's AdamWStep takes them from here, so that their results
// stay equal.
func (h AdamW) Scalars(lr float64, t int64) (stepSize, bc2Sqrt, shrink float64) {
	tf := float64(t)
	return lr / (1 - math.Pow(h.Beta1, tf)), math.Sqrt(1 - math.Pow(h.Beta2, tf)), 1 - lr*h.WeightDecay
}

// AdamState is AdamW's state for the parameters of one arena, held on the
// arena's backend (Optimizer.NewAdamState): flat moments, so that a
// checkpoint reads them, and the optimizer updates them, as one buffer each.
type AdamState[T Float] struct {
	// Config is the hyper-parameters of every step.
	Config AdamW
	// M and V are the first and second moments, laid out like the arena's
	// values.
	M, V Storage[T]
	// Steps is the number of updates applied: one count for every
	// parameter, as they all step together.
	Steps int64
	// Decay[i] reports whether parameter i of the arena takes weight decay.
	Decay []bool
	// Table is the backend's own form of the arena's layout and of Decay
	// for its update kernel (the CUDA backend's segment table in device
	// memory); nil on the CPU.
	Table any
}
