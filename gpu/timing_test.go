package gpu

import (
	"testing"
	"time"

	"dflash/internal/testseed"
)

// TestTimingStats checks Percentile, Median, Min and Mean against a
// brute-force count: the p-th percentile s must have at most floor(p/100*n)
// samples strictly below it and more than that many at or below it.
func TestTimingStats(t *testing.T) {
	rng := testseed.New(t)
	for n := 1; n <= 40; n++ {
		tm := Timing{}
		var sum time.Duration
		lo := time.Duration(1 << 62)
		for range n {
			s := time.Duration(rng.IntN(50)) * time.Microsecond // repeats on purpose
			tm.Samples = append(tm.Samples, s)
			sum += s
			lo = min(lo, s)
		}
		orig := append([]time.Duration(nil), tm.Samples...)
		for _, p := range []float64{0, 10, 25, 50, 90, 99, 100} {
			got := tm.Percentile(p)
			k := min(int(p/100*float64(n)), n-1)
			below, atOrBelow := 0, 0
			for _, s := range tm.Samples {
				if s < got {
					below++
				}
				if s <= got {
					atOrBelow++
				}
			}
			if below > k || atOrBelow <= k {
				t.Fatalf("n %d p %v: %v has %d samples below and %d at or below, want index %d", n, p, got, below, atOrBelow, k)
			}
		}
		if tm.Median() != tm.Percentile(50) || tm.Min() != lo || tm.Mean() != sum/time.Duration(n) {
			t.Fatalf("n %d: median %v min %v (want %v) mean %v (want %v)", n, tm.Median(), tm.Min(), lo, tm.Mean(), sum/time.Duration(n))
		}
		for i := range orig {
			if orig[i] != tm.Samples[i] {
				t.Fatalf("n %d: Percentile reordered the samples", n)
			}
		}
	}
	// The upper median of an even count, as the benchmarks always reported.
	if got := (Timing{Samples: []time.Duration{4, 1, 3, 2}}).Median(); got != 3 {
		t.Fatalf("median of 1..4 = %v, want 3", got)
	}
}
