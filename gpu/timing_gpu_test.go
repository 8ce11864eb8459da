package gpu_test

import (
	"testing"

	"dflash/gpu"
	"dflash/internal/gputest"
)

// TestDeviceTime times memsets of 64 MiB and 256 MiB on the default stream:
// every repetition is timed, warm-ups are not, and the larger fill takes
// longer at the median.
func TestDeviceTime(t *testing.T) {
	w := gputest.Worker0(t)
	err := w.Run(func(d *gpu.Device) error {
		big, err := d.Alloc(256 << 20)
		if err != nil {
			return err
		}
		defer d.Free(big)
		small := gpu.Buffer{Ptr: big.Ptr, Size: 64 << 20}
		calls := 0
		fill := func(b gpu.Buffer) func() error {
			return func() error { calls++; return d.Memset(b, 1, nil) }
		}
		ts, err := d.Time(2, 7, fill(small))
		if err != nil {
			return err
		}
		tb, err := d.Time(2, 7, fill(big))
		if err != nil {
			return err
		}
		if calls != 18 || len(ts.Samples) != 7 || len(tb.Samples) != 7 {
			t.Errorf("%d calls, %d and %d samples; want 18 calls, 7 samples each", calls, len(ts.Samples), len(tb.Samples))
		}
		if ts.Min() <= 0 || tb.Median() <= ts.Median() {
			t.Errorf("64 MiB fill %v, 256 MiB fill %v (medians): want 0 < small < big", ts.Median(), tb.Median())
		}
		t.Logf("memset 64 MiB %v, 256 MiB %v (median of 7)", ts.Median(), tb.Median())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
