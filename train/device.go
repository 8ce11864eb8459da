package train

// Device keeps a run's parameters, gradients and optimizer moments in the
// memory of an accelerator (package tensor/tensorcuda provides one). Run
// then zeroes, scales, clips and updates through it, and the host Params
// and AdamW of the run are mirrors that hold the state only around
// checkpoints: Pull copies the device state into them before one is
// written, Push copies them back after a resume.
type Device interface {
	// ZeroGrads sets every gradient to zero.
	ZeroGrads()
	// ScaleGrads multiplies every gradient by s.
	ScaleGrads(s float32)
	// ClipGradNorm is ClipGradNorm on the device's gradients: it returns
	// the global norm before clipping (reading it back, a synchronisation).
	ClipGradNorm(maxNorm float64) float64
	// Step applies one AdamW update with learning rate lr, as AdamW.Step.
	Step(lr float64)
	// Pull copies the parameter values, the moments and the step counts
	// into params and opt.
	Pull(params []*Param, opt *AdamW) error
	// Push copies them from params and opt to the device.
	Push(params []*Param, opt *AdamW) error
}

// HostDevice returns the Device of host memory: params and opt themselves
// (Pull and Push do nothing). Run uses it when Hooks.Device is nil.
func HostDevice(params []*Param, opt *AdamW) Device { return hostDevice{params, opt} }

type hostDevice struct {
	params []*Param
	opt    *AdamW
}

func (h hostDevice) ZeroGrads()                           { ZeroGrads(h.params) }
func (h hostDevice) ScaleGrads(s float32)                 { ScaleGrads(h.params, s) }
func (h hostDevice) ClipGradNorm(maxNorm float64) float64 { return ClipGradNorm(h.params, maxNorm) }
func (h hostDevice) Step(lr float64)                      { h.opt.Step(lr) }
func (h hostDevice) Pull([]*Param, *AdamW) error          { return nil }
func (h hostDevice) Push([]*Param, *AdamW) error          { return nil }

// State returns the optimizer's flat moments (in the order of the
// parameters it was made with) and the per-parameter step counts, as views
// a Device copies to and from.
func (o *AdamW) State() (m, v []float32, steps []int64) { return o.mFlat, o.vFlat, o.steps }
