package gpu

import (
	"fmt"
	"slices"
	"time"
)

// Timing holds the GPU time of each timed repetition of Device.Time, in run
// order.
type Timing struct {
	Samples []time.Duration
}

// Percentile returns the sample at index floor(p/100 * n) of the n sorted
// samples, clamped to the last: p 0 is the minimum, 50 the median (the
// upper one for an even count), 100 the maximum. It panics on no samples.
func (t Timing) Percentile(p float64) time.Duration {
	if len(t.Samples) == 0 {
		panic("gpu: Percentile of no samples")
	}
	s := slices.Sorted(slices.Values(t.Samples))
	i := min(int(p/100*float64(len(s))), len(s)-1)
	return s[max(i, 0)]
}

// Median returns Percentile(50).
func (t Timing) Median() time.Duration { return t.Percentile(50) }

// Min returns the fastest sample.
func (t Timing) Min() time.Duration { return slices.Min(t.Samples) }

// Mean returns the average sample.
func (t Timing) Mean() time.Duration {
	if len(t.Samples) == 0 {
		panic("gpu: Mean of no samples")
	}
	var sum time.Duration
	for _, s := range t.Samples {
		sum += s
	}
	return sum / time.Duration(len(t.Samples))
}

// Time runs fn warmup times untimed, then reps times, each between two
// events recorded on the default stream and waited for, and returns the
// GPU time of each timed call. fn must queue its work on the default stream
// (nil); to time a batch of launches as one sample, loop inside fn. This is
// the one timing loop of dflash: benchmarks, tuning and tests call it.
func (d *Device) Time(warmup, reps int, fn func() error) (Timing, error) {
	if err := d.check("Time"); err != nil {
		return Timing{}, err
	}
	if reps < 1 || warmup < 0 {
		panic(fmt.Sprintf("gpu: Time with %d warm-ups and %d repetitions", warmup, reps))
	}
	start, err := d.NewEvent()
	if err != nil {
		return Timing{}, err
	}
	defer start.Destroy()
	end, err := d.NewEvent()
	if err != nil {
		return Timing{}, err
	}
	defer end.Destroy()
	for range warmup {
		if err := fn(); err != nil {
			return Timing{}, err
		}
	}
	t := Timing{Samples: make([]time.Duration, 0, reps)}
	for range reps {
		if err := start.Record(nil); err != nil {
			return Timing{}, err
		}
		if err := fn(); err != nil {
			return Timing{}, err
		}
		if err := end.Record(nil); err != nil {
			return Timing{}, err
		}
		if err := end.Synchronize(); err != nil {
			return Timing{}, err
		}
		dt, err := end.Since(start)
		if err != nil {
			return Timing{}, err
		}
		t.Samples = append(t.Samples, dt)
	}
	return t, nil
}
