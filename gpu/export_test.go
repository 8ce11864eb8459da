package gpu

import "errors"

// SetReplaySegment sets the calls per graph of d's replayed regions, so a
// test's short region spans several graphs.
func SetReplaySegment(d *Device, n int) { d.replaySeg = n }

// ForgetGemmPlans destroys d's GEMM plans, as if a new process started,
// and turns SetGemmTuning off.
func ForgetGemmPlans(d *Device) error {
	d.tune = nil
	if d.blas == nil {
		return nil
	}
	var errs []error
	for s, p := range d.blas.plans {
		errs = append(errs, p.destroy())
		delete(d.blas.plans, s)
	}
	return errors.Join(errs...)
}

// PickGemm is the rule by which tuning picks a candidate from its times.
var PickGemm = pickGemm
