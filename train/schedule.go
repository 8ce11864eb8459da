package train

import "math"

// Schedule is linear warmup followed by cosine decay to MinLRRatio*BaseLR.
//
// For the optimizer step with 0-based index s:
//
//	s < W:            lr = BaseLR * (s+1)/W
//	otherwise:        p = min(1, (s-W)/max(1, T-W))
//	                  lr = BaseLR * (r + (1-r) * (1+cos(pi*p))/2)
//
// with W = WarmupSteps, T = TotalSteps, r = MinLRRatio. The first step after warmup
// runs at BaseLR and the last (s = T-1) just above r*BaseLR.
type Schedule struct {
	BaseLR      float64 `json:"base_lr"`
	WarmupSteps int     `json:"warmup_steps"`
	TotalSteps  int     `json:"total_steps"`
	MinLRRatio  float64 `json:"min_lr_ratio"`
}

// LR returns the learning rate of optimizer step s (0-based).
func (sc Schedule) LR(s int) float64 {
	if s < sc.WarmupSteps {
		return sc.BaseLR * float64(s+1) / float64(sc.WarmupSteps)
	}
	p := float64(s-sc.WarmupSteps) / float64(max(1, sc.TotalSteps-sc.WarmupSteps))
	p = min(1, p)
	r := sc.MinLRRatio
	return sc.BaseLR * (r + (1-r)*(1+math.Cos(math.Pi*p))/2)
}
