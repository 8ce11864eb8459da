package train

import "math"

// GradNorm returns the global L2 norm of all gradients, sqrt(sum_p sum_i g_pi^2),
// accumulated in float64.
func GradNorm(params []*Param) float64 {
	var s float64
	for _, p := range params {
		for _, g := range p.Grad {
			s += float64(g) * float64(g)
		}
	}
	return math.Sqrt(s)
}

// ClipGradNorm scales all gradients by min(1, maxNorm/(norm+1e-6)), where norm is
// their global L2 norm, and returns that norm (before clipping). maxNorm <= 0 only
// measures. A non-finite norm is returned and nothing is scaled.
func ClipGradNorm(params []*Param, maxNorm float64) float64 {
	norm := GradNorm(params)
	if c, ok := ClipScale(norm, maxNorm); ok {
		ScaleGrads(params, c)
	}
	return norm
}

// ClipScale returns the factor min(1, maxNorm/(norm+1e-6)) by which
// ClipGradNorm scales gradients of global norm norm, and whether it
// scales them at all: not when maxNorm <= 0, the norm is not finite or the
// factor is not below 1. Every train.Device's ClipGradNorm follows it.
func ClipScale(norm, maxNorm float64) (float32, bool) {
	if maxNorm <= 0 || math.IsNaN(norm) || math.IsInf(norm, 0) {
		return 1, false
	}
	c := maxNorm / (norm + 1e-6)
	return float32(c), c < 1
}
