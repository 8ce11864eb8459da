package gpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"dflash/cuda"
)

// Replay turns a region of work that repeats, one step after another, into
// a CUDA graph launched in one call. Its first run of a key runs the region
// as usual (kernels compile, GEMMs plan, memory grows). Every later run is a
// dry run: the region's host code runs, allocating and bookkeeping as
// always, but its kernels, GEMMs, memsets and copies are recorded instead of
// queued, each with a signature of everything that makes it what it is
// (function, grid, arguments and tensor maps, pointers, sizes, scalars).
// The second run captures the recorded work into a graph; later runs
// compare their signatures with the graph's and launch it when every one
// matches. When one differs (an address or a scalar moved), the recorded
// work is captured again and the new graph launched: a replay never runs
// work other than what the region asked for.

// ReplayKind says what a Replay call did.
type ReplayKind int

const (
	ReplayEager      ReplayKind = iota // the key's first run: queued as usual
	ReplayCaptured                     // recorded and captured into a new graph, launched
	ReplayLaunched                     // the recorded work matched the graph: launched
	ReplayRecaptured                   // it did not match: captured again, launched
	ReplayUngraphed                    // capture failed before: the recorded work queued as usual
)

func (k ReplayKind) String() string {
	return [...]string{"eager", "captured", "launched", "recaptured", "ungraphed"}[k]
}

// ErrReplayHostWait is returned by a call that waits for the device,
// copies to or from it, or records an event inside a Replay region after
// its first run: there the work is only recorded, so the call would see or
// mark none of it.
var ErrReplayHostWait = errors.New("gpu: host copy or wait inside a replayed region")

// replaySlot is one key's state.
type replaySlot struct {
	runs  int
	graph *Graph
	calls []recCall // what the graph holds
	err   error     // the capture failure that made the key ungraphed
	diff  string    // how the last recaptured run differed from the graph
}

// recCall is one recorded piece of work.
type recCall struct {
	sig []byte        // its signature: a kind byte, then words
	fn  cuda.Function // the kernel of a launch
}

// recorder holds a dry run's work.
type recorder struct {
	calls []recCall
	queue []func() error
	buf   []byte
}

// call records one piece of work: its signature bytes, its kernel (0 for
// other work) and how to queue it.
func (r *recorder) call(sig []byte, fn cuda.Function, queue func() error) {
	r.calls = append(r.calls, recCall{sig: bytes.Clone(sig), fn: fn})
	r.queue = append(r.queue, queue)
}

// firstDiff describes where calls b first differ from a ("" when equal).
func firstDiff(a, b []recCall) string {
	for i := range min(len(a), len(b)) {
		x, y := a[i].sig, b[i].sig
		if bytes.Equal(x, y) {
			continue
		}
		what := map[byte]string{'g': "GEMM", 'm': "memset", 'c': "copy"}[y[0]]
		if y[0] == 'k' {
			what = "kernel " + cuda.FuncName(b[i].fn)
		}
		if x[0] != y[0] || len(x) != len(y) {
			return fmt.Sprintf("call %d of %d (%s): another kind of work than the graph's", i, len(b), what)
		}
		w := 0
		for w*8+1 < len(y) && bytes.Equal(x[1+w*8:min(len(x), 9+w*8)], y[1+w*8:min(len(y), 9+w*8)]) {
			w++
		}
		word := func(s []byte) []byte { return s[1+w*8 : min(len(s), 9+w*8)] }
		return fmt.Sprintf("call %d of %d (%s): signature word %d is %x, the graph's %x", i, len(b), what, w, word(y), word(x))
	}
	if len(a) != len(b) {
		return fmt.Sprintf("%d calls, the graph has %d", len(b), len(a))
	}
	return ""
}

// put appends integers to a signature.
func put(b []byte, v ...uint64) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

// Replay runs fn, a region of work queued on the default stream that
// repeats with the same shapes at every call with this key, as described
// above. fn must not copy between host and device nor wait for the device
// (ErrReplayHostWait after the first run), and must queue on the default
// stream only. Keys are compared with ==.
func (d *Device) Replay(key any, fn func() error) (ReplayKind, error) {
	if err := d.check("Replay"); err != nil {
		return 0, err
	}
	if d.rec != nil {
		return 0, fmt.Errorf("gpu %d: Replay inside a replayed region", d.info.Ordinal)
	}
	if d.replays == nil {
		d.replays = map[any]*replaySlot{}
	}
	sl := d.replays[key]
	if sl == nil {
		sl = &replaySlot{}
		d.replays[key] = sl
	}
	sl.runs++
	if sl.runs == 1 {
		return ReplayEager, fn()
	}
	rec := &recorder{}
	d.rec = rec
	err := func() error {
		defer func() { d.rec = nil }() // also when fn panics
		return fn()
	}()
	if err != nil {
		return 0, err // nothing of the region was queued
	}
	if sl.err != nil {
		return ReplayUngraphed, runQueue(rec.queue)
	}
	kind := ReplayLaunched
	if sl.graph == nil {
		kind = ReplayCaptured
	} else if diff := firstDiff(sl.calls, rec.calls); diff != "" {
		kind, sl.diff = ReplayRecaptured, diff
		if err := sl.graph.Destroy(); err != nil {
			return 0, err
		}
		sl.graph = nil
	}
	if sl.graph == nil {
		g, err := d.Capture(nil, func(*Stream) error { return runQueue(rec.queue) })
		if err != nil {
			sl.err = err
			return ReplayUngraphed, runQueue(rec.queue)
		}
		sl.graph, sl.calls = g, rec.calls
	}
	return kind, sl.graph.Launch(nil)
}

// ReplayDiff describes how key's last recaptured run differed from the
// graph it replaced ("" if none was).
func (d *Device) ReplayDiff(key any) string {
	if sl := d.replays[key]; sl != nil {
		return sl.diff
	}
	return ""
}

// ReplayErr returns the capture failure that made key's region run
// without a graph, or nil.
func (d *Device) ReplayErr(key any) error {
	if sl := d.replays[key]; sl != nil {
		return sl.err
	}
	return nil
}

// runQueue queues recorded work in order.
func runQueue(q []func() error) error {
	for _, f := range q {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// launch records a kernel launch of a dry run.
func (r *recorder) launch(f cuda.Function, grid, block cuda.Dim3, smem uint32, s cuda.Stream, args *cuda.Args) {
	b := put(append(r.buf[:0], 'k'), uint64(f), uint64(grid.X), uint64(grid.Y), uint64(grid.Z), uint64(block.X), uint64(block.Y),
		uint64(block.Z), uint64(smem), uint64(s))
	if args != nil {
		b = args.AppendBytes(b)
		args = args.Clone() // the caller may reuse its list before the queue runs
	}
	r.buf = b
	r.call(b, f, func() error { return cuda.LaunchKernel(f, grid, block, smem, s, args) })
}

// other records a GEMM, memset or copy of a dry run: kind ('g', 'm', 'c')
// and words identify it, queue queues it.
func (r *recorder) other(queue func() error, kind byte, words ...uint64) {
	r.buf = put(append(r.buf[:0], kind), words...)
	r.call(r.buf, 0, queue)
}
