package tensor

import (
	"cmp"
	"slices"
)

// OpTime is the device time of one kind of op in a profile: the ops of one
// phase with one label (the op, its shape and dtypes), summed.
type OpTime struct {
	Phase string  `json:"phase"`
	Op    string  `json:"op"`
	Calls int     `json:"calls"`
	MS    float64 `json:"ms"`
	// FLOPs is the floating-point operations of the calls together, for the
	// ops that count them (GEMMs); 0 otherwise.
	FLOPs float64 `json:"flops,omitempty"`
}

// BetweenOps labels, in each phase, the stream's time outside its ops: from
// the phase's start to its first op and between one op's end and the next
// one's start; host-to-device copies, which are not ops, and the GPU waiting
// for its host to queue work.
const BetweenOps = "(between ops: uploads, waits for the host)"

// Profiler is implemented by backends that can time each op on the device
// (the CUDA backend, with a pair of events around every op). Between
// StartProfile and StopProfile every op is timed and labelled with the
// phase last named by ProfilePhase; StopProfile waits for the queued work
// and returns the totals, largest first. An op's time is the stream's time
// between its two events: it includes any wait of the GPU for the host to
// queue the op's work (a first call that plans a GEMM or loads a kernel, a
// GPU starved by its host). Timing adds two event records to every op, so a
// profiled step runs a little slower than an unprofiled one.
type Profiler interface {
	StartProfile()
	ProfilePhase(name string)
	StopProfile() ([]OpTime, error)
}

// ProfilerOf returns b's Profiler and true when b times its ops (the CUDA
// backend), and false otherwise. Profiling is a tool, not part of the
// Backend contract: this is the one place that asks.
func ProfilerOf[T Float](b Backend[T]) (Profiler, bool) {
	p, ok := b.(Profiler)
	return p, ok
}

// SetProfilePhase names the phase of the ops queued next when b is a
// Profiler that is profiling, and does nothing otherwise.
func SetProfilePhase[T Float](b Backend[T], name string) {
	if p, ok := ProfilerOf(b); ok {
		p.ProfilePhase(name)
	}
}

// SortOpTimes orders ts by time, largest first (then by phase and op).
func SortOpTimes(ts []OpTime) {
	slices.SortFunc(ts, func(a, b OpTime) int {
		if c := cmp.Compare(b.MS, a.MS); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Phase, b.Phase); c != 0 {
			return c
		}
		return cmp.Compare(a.Op, b.Op)
	})
}
