package gpu

import (
	"fmt"
	"sync/atomic"
)

// Counters is a snapshot of a device's host<->device traffic and host
// waits: the calls that copy between host and device memory (calls and
// bytes, each direction) and the calls that block the host until the device
// has reached a point (Device.Synchronize, Stream.Synchronize,
// Event.Synchronize, and the waits inside Upload and Download).
//
// A training step should make none of them except those it asks for
// (issue 13, "No hidden synchronisation"): take a snapshot before the
// region, and after it check that Since(before) IsZero.
type Counters struct {
	HtoDCalls int64 `json:"htod_calls"` // Upload calls
	HtoDBytes int64 `json:"htod_bytes"`
	DtoHCalls int64 `json:"dtoh_calls"` // Download calls
	DtoHBytes int64 `json:"dtoh_bytes"`
	Syncs     int64 `json:"syncs"` // host waits for the device
}

// Since returns the counts made after before, a snapshot of the same device.
func (c Counters) Since(before Counters) Counters {
	return Counters{
		HtoDCalls: c.HtoDCalls - before.HtoDCalls, HtoDBytes: c.HtoDBytes - before.HtoDBytes,
		DtoHCalls: c.DtoHCalls - before.DtoHCalls, DtoHBytes: c.DtoHBytes - before.DtoHBytes,
		Syncs: c.Syncs - before.Syncs,
	}
}

// IsZero reports whether c counts no copy and no synchronisation.
func (c Counters) IsZero() bool { return c == Counters{} }

// String writes c for people and test failures.
func (c Counters) String() string {
	return fmt.Sprintf("%d host->device copies (%d bytes), %d device->host copies (%d bytes), %d synchronisations",
		c.HtoDCalls, c.HtoDBytes, c.DtoHCalls, c.DtoHBytes, c.Syncs)
}

// counters is the live, atomic form of Counters, one per device. The
// wrappers of package gpu add to it when they issue the call (whatever the
// call then returns), so a region's counts do not depend on its errors.
type counters struct {
	htodCalls, htodBytes, dtohCalls, dtohBytes, syncs atomic.Int64
	launches                                          atomic.Int64 // Launches; not part of Counters
}

func (c *counters) htod(n int64) { c.htodCalls.Add(1); c.htodBytes.Add(n) }
func (c *counters) dtoh(n int64) { c.dtohCalls.Add(1); c.dtohBytes.Add(n) }
func (c *counters) sync()        { c.syncs.Add(1) }

func (c *counters) snapshot() Counters {
	return Counters{HtoDCalls: c.htodCalls.Load(), HtoDBytes: c.htodBytes.Load(),
		DtoHCalls: c.dtohCalls.Load(), DtoHBytes: c.dtohBytes.Load(), Syncs: c.syncs.Load()}
}

// Counters returns a snapshot of the device's copy and synchronisation
// counts since it was opened. Unlike the other methods it may be called
// from any goroutine.
func (d *Device) Counters() Counters { return d.count.snapshot() }

// launched counts one launch queued on a stream (Launches), unless it is
// being captured into a graph (the graph's launch counts instead). It runs
// on the worker thread, where Capture sets capturing.
func (d *Device) launched() {
	if !d.capturing {
		d.count.launches.Add(1)
	}
}

// Launches returns the number of launches the device has queued on its
// streams since it was opened: each kernel (Launch), each GEMM (one,
// whatever kernels cuBLASLt runs for it) and each graph (Graph.Launch: one,
// whatever it holds). Work captured into a graph counts where the graph is
// launched; a Replay region's recorded work counts as the graphs it
// launches, or call by call when it runs without one. Copies, memsets and
// event records are not launches. It is apart from Counters, whose IsZero
// says a region waited for nothing and copied nothing: launches are what a
// region is for. Like Counters it may be called from any goroutine.
func (d *Device) Launches() int64 { return d.count.launches.Load() }
