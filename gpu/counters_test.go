package gpu

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"dflash/internal/testseed"
)

// TestCountersSince adds random counts from many goroutines at once and
// checks that the snapshot difference is exactly their sum.
func TestCountersSince(t *testing.T) {
	rng := testseed.New(t)
	var c counters
	c.htod(7) // counts before the region must not show in Since
	c.sync()
	before := c.snapshot()
	if !before.Since(before).IsZero() {
		t.Fatalf("a snapshot minus itself = %v, want zero", before.Since(before))
	}
	const goroutines = 8
	var want Counters
	plans := make([][]int64, goroutines) // per goroutine: byte counts, sign = direction, 0 = sync
	for g := range plans {
		for range 200 {
			v := rng.Int64N(1<<20) - 1<<19
			plans[g] = append(plans[g], v)
			switch {
			case v > 0:
				want.HtoDCalls++
				want.HtoDBytes += v
			case v < 0:
				want.DtoHCalls++
				want.DtoHBytes += -v
			default:
				want.Syncs++
			}
		}
	}
	var wg sync.WaitGroup
	for _, plan := range plans {
		wg.Go(func() {
			for _, v := range plan {
				switch {
				case v > 0:
					c.htod(v)
				case v < 0:
					c.dtoh(-v)
				default:
					c.sync()
				}
			}
		})
	}
	wg.Wait()
	got := c.snapshot().Since(before)
	if got != want {
		t.Fatalf("Since = %v\nwant    %v", got, want)
	}
	if got.IsZero() {
		t.Fatal("IsZero true for a region with counts")
	}
	for _, part := range []string{"host->device copies", "device->host copies", "synchronisations"} {
		if !strings.Contains(got.String(), part) {
			t.Errorf("String() = %q, missing %q", got.String(), part)
		}
	}
}

// TestDeviceCountsSynchronize checks that the wrappers count a
// synchronisation when they issue it (here without CUDA behind the device, so
// the call itself fails) and that a call refused off the worker thread
// counts nothing.
func TestDeviceCountsSynchronize(t *testing.T) {
	w := fakeWorker(t, 5)
	var d *Device
	err := w.Run(func(dev *Device) error {
		d = dev
		before := d.Counters()
		_ = d.Synchronize()               // no CUDA here: fails, still issued
		_ = (&Stream{d: d}).Synchronize() // likewise
		if got := d.Counters().Since(before); got != (Counters{Syncs: 2}) {
			t.Errorf("after Device.Synchronize and Stream.Synchronize: %v, want 2 synchronisations", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !debugOn.Load() {
		t.Skip("debug mode off: the foreign-thread check is not active")
	}
	before := d.Counters()
	var fe *ForeignThreadError
	if err := d.Synchronize(); !errors.As(err, &fe) {
		t.Fatalf("Synchronize off the worker thread: %v, want a ForeignThreadError", err)
	}
	if got := d.Counters().Since(before); !got.IsZero() {
		t.Errorf("a refused call counted %v", got)
	}
}
