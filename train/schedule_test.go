package train

import (
	"math"
	"testing"
)

func TestSchedule(t *testing.T) {
	sc := Schedule{BaseLR: 1e-3, WarmupSteps: 10, TotalSteps: 110, MinLRRatio: 0.1}
	cases := []struct {
		step int
		want float64
	}{
		{0, 1e-4},                  // first warmup step: base/W
		{4, 5e-4},                  // linear
		{9, 1e-3},                  // warmup ends at the peak
		{10, 1e-3},                 // cosine starts at the peak
		{60, 1e-3 * (0.1 + 0.9/2)}, // half way: cos(pi/2) = 0
		{110, 1e-4},                // end: min ratio
		{500, 1e-4},                // past the end stays at the floor
	}
	for _, c := range cases {
		if got := sc.LR(c.step); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("LR(%d) = %g, want %g", c.step, got, c.want)
		}
	}
	// Cosine part is non-increasing and stays within [min, base].
	prev := math.Inf(1)
	for s := sc.WarmupSteps; s < sc.TotalSteps; s++ {
		lr := sc.LR(s)
		if lr > prev || lr < 1e-4-1e-18 || lr > 1e-3 {
			t.Fatalf("LR(%d) = %g after %g", s, lr, prev)
		}
		prev = lr
	}
	// No warmup, no floor: starts at base and reaches 0 at the end.
	z := Schedule{BaseLR: 2, TotalSteps: 4}
	for s, want := range []float64{2, 1 + math.Cos(math.Pi/4), 1, 1 + math.Cos(3*math.Pi/4)} {
		if got := z.LR(s); math.Abs(got-want) > 1e-12 {
			t.Errorf("no warmup: LR(%d) = %g, want %g", s, got, want)
		}
	}
}
