package gpu

import (
	"bytes"
	"cmp"
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
//
// The graph is kept in segments of replaySegment calls, and a dry run
// launches each segment as soon as its last call has been recorded and
// matched, while the host goes on recording the next. The device so starts
// a region after one segment's host code, not the whole region's: a region
// that begins on an idle device (the step's first, after the host waited
// for the last step's loss) would otherwise leave it idle for the length
// of its dry run. A mismatch stops the launches; the calls from the first
// segment not launched on are then captured anew and launched.

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

// replaySegment is the number of calls in each graph of a replayed region
// (its last may hold fewer).
const replaySegment = 64

// replaySlot is one key's state.
type replaySlot struct {
	runs   int
	graphs []*Graph  // graphs[i] holds calls[i*seg : (i+1)*seg]
	seg    int       // calls per graph
	calls  []recCall // what the graphs hold
	err    error     // the capture failure that made the key ungraphed
	diff   string    // how the last recaptured run differed from the graphs
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
	// Launching the slot's graphs while recording: matched counts the
	// leading calls equal to the graphs' (it stops at the first that is
	// not), launched the graphs launched; err is a failed launch.
	slot     *replaySlot
	matched  int
	launched int
	err      error
}

// call records one piece of work: its signature bytes, its kernel (0 for
// other work) and how to queue it. While every call so far matches the
// slot's graphs, it launches each graph whose calls are all recorded.
func (r *recorder) call(sig []byte, fn cuda.Function, queue func() error) {
	i := len(r.calls)
	r.calls = append(r.calls, recCall{sig: bytes.Clone(sig), fn: fn})
	r.queue = append(r.queue, queue)
	sl := r.slot
	if sl == nil || r.matched != i || i >= len(sl.calls) || !bytes.Equal(sig, sl.calls[i].sig) {
		return
	}
	r.matched++
	if r.matched%sl.seg == 0 && r.err == nil {
		r.launchNext()
	}
}

// launchNext launches the slot's next graph.
func (r *recorder) launchNext() {
	if r.err = r.slot.graphs[r.launched].Launch(nil); r.err == nil {
		r.launched++
	}
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
	if sl.err == nil && sl.graphs != nil {
		rec.slot = sl
	}
	d.rec = rec
	err := func() error {
		defer func() { d.rec = nil }() // also when fn panics
		return fn()
	}()
	if err == nil {
		err = rec.err
	}
	if err != nil {
		return 0, err // the region's work is not all queued: its step is lost
	}
	if sl.err != nil {
		return ReplayUngraphed, runQueue(rec.queue)
	}
	if sl.graphs != nil && rec.matched == len(rec.calls) && len(rec.calls) == len(sl.calls) {
		if rec.launched < len(sl.graphs) { // the last graph, shorter than a segment
			if rec.launchNext(); rec.err != nil {
				return 0, rec.err
			}
		}
		return ReplayLaunched, nil
	}
	kind := ReplayCaptured
	if sl.graphs != nil {
		kind, sl.diff = ReplayRecaptured, firstDiff(sl.calls, rec.calls)
	}
	// The launched graphs did the first calls, which equal the recorded
	// ones; the segments from there are captured anew (the earlier ones
	// only when they could differ next time: they are kept as they are).
	from := rec.launched
	if err := sl.capture(d, rec, from); err != nil {
		sl.err = err
		return ReplayUngraphed, runQueue(rec.queue[from*sl.seg:])
	}
	for _, g := range sl.graphs[from:] {
		if err := g.Launch(nil); err != nil {
			return 0, err
		}
	}
	return kind, nil
}

// capture replaces the slot's graphs from segment from on by graphs of the
// recorded calls from there, and the slot's calls by the recorded ones.
func (sl *replaySlot) capture(d *Device, rec *recorder, from int) error {
	if sl.seg == 0 {
		sl.seg = cmp.Or(d.replaySeg, replaySegment)
	}
	for _, g := range sl.graphs[from:] {
		if err := g.Destroy(); err != nil {
			return err
		}
	}
	sl.graphs, sl.calls = sl.graphs[:from], rec.calls
	for lo := from * sl.seg; lo < len(rec.queue); lo += sl.seg {
		q := rec.queue[lo:min(lo+sl.seg, len(rec.queue))]
		g, err := d.Capture(nil, func(*Stream) error { return runQueue(q) })
		if err != nil {
			return err
		}
		sl.graphs = append(sl.graphs, g)
	}
	return nil
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

// launch records a kernel launch of a dry run; count is called when the
// recorded launch is queued (Device.launched).
func (r *recorder) launch(f cuda.Function, grid, block cuda.Dim3, smem uint32, s cuda.Stream, args *cuda.Args, count func()) {
	b := put(append(r.buf[:0], 'k'), uint64(f), uint64(grid.X), uint64(grid.Y), uint64(grid.Z), uint64(block.X), uint64(block.Y),
		uint64(block.Z), uint64(smem), uint64(s))
	if args != nil {
		b = args.AppendBytes(b)
		args = args.Clone() // the caller may reuse its list before the queue runs
	}
	r.buf = b
	r.call(b, f, func() error { count(); return cuda.LaunchKernel(f, grid, block, smem, s, args) })
}

// other records a GEMM, memset or copy of a dry run: kind ('g', 'm', 'c')
// and words identify it, queue queues it.
func (r *recorder) other(queue func() error, kind byte, words ...uint64) {
	r.buf = put(append(r.buf[:0], kind), words...)
	r.call(r.buf, 0, queue)
}
