package gpu_test

import (
	"fmt"
	"testing"

	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
)

// TestCountersOnGPU counts a known mix of copies and synchronisations on GPU
// 0, then checks that a region of device-side work only (memset, a
// device-to-device copy, an event record) counts nothing.
func TestCountersOnGPU(t *testing.T) {
	w := gputest.Worker0(t)
	rng := testseed.New(t)
	n := 1 + rng.IntN(1<<16)
	err := w.Run(func(d *gpu.Device) error {
		a, err := d.Alloc(int64(4 * n))
		if err != nil {
			return err
		}
		defer d.Free(a)
		b, err := d.Alloc(int64(4 * n))
		if err != nil {
			return err
		}
		defer d.Free(b)
		ev, err := d.NewEvent()
		if err != nil {
			return err
		}
		defer ev.Destroy()
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		before := d.Counters()
		if err := gpu.Upload(d, a, x); err != nil {
			return err
		}
		if err := gpu.Download(d, x[:n/2+1], a); err != nil {
			return err
		}
		if err := d.Synchronize(); err != nil {
			return err
		}
		if err := d.Stream().Synchronize(); err != nil {
			return err
		}
		if err := ev.Record(nil); err != nil {
			return err
		}
		if err := ev.Synchronize(); err != nil {
			return err
		}
		want := gpu.Counters{HtoDCalls: 1, HtoDBytes: int64(4 * n), DtoHCalls: 1, DtoHBytes: int64(4 * (n/2 + 1)), Syncs: 5}
		got := d.Counters().Since(before)
		ok := got == want
		if !ok {
			t.Errorf("counted %v\nwant    %v", got, want)
		}
		quiet := d.Counters()
		if err := d.Memset(b, 0, nil); err != nil {
			return err
		}
		if err := d.CopyAsync(b, a, a.Size, nil); err != nil {
			return err
		}
		if err := ev.Record(nil); err != nil {
			return err
		}
		region := d.Counters().Since(quiet)
		if !region.IsZero() {
			t.Errorf("device-side work counted %v", region)
		}
		reps := 3
		tm := d.Counters()
		if _, err := d.Time(0, reps, func() error { return nil }); err != nil {
			return err
		}
		timed := d.Counters().Since(tm)
		if timed != (gpu.Counters{Syncs: int64(reps)}) {
			t.Errorf("Device.Time with %d repetitions counted %v, want %d synchronisations", reps, timed, reps)
		}
		report(t, "device counters: copies and synchronisations counted, device-side work counts none",
			ok && region.IsZero() && timed.Syncs == int64(reps), fmt.Sprintf("%v; region %v", got, region), nil)
		return d.Synchronize()
	})
	if err != nil {
		t.Fatal(err)
	}
}
