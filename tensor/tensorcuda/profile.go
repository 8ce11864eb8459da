package tensorcuda

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/tensor"
)

// profiler times the backend's ops with CUDA events (tensor.Profiler): a
// pair recorded around every op on the worker's stream, read when the
// profile stops. Events come from a pool that grows to the number of ops
// profiled and is reused by the next profile.
type profiler struct {
	d     *gpu.Device
	pool  []*gpu.Event
	used  int
	phase string
	spans []span
}

// span is one timed op: its label, FLOPs and the pool indices of its events;
// with no op, the start of a phase (one event).
type span struct {
	phase, op  string
	flops      float64
	begin, end int
}

var _ tensor.Profiler = (*Backend)(nil)

// StartProfile starts timing every op (tensor.Profiler). Without a device
// (the CPU tests' fake memory) it does nothing.
func (b *Backend) StartProfile() {
	if b.d == nil {
		return
	}
	if b.prof == nil {
		b.prof = &profiler{d: b.d}
	}
	b.prof.spans, b.prof.used, b.prof.phase = b.prof.spans[:0], 0, ""
	b.profiling = true
}

// ProfilePhase labels the ops queued from now on (tensor.Profiler).
func (b *Backend) ProfilePhase(name string) {
	if b.profiling {
		p := b.prof
		p.phase = name
		// A mark with no op: the stream's time from here to the phase's
		// first op (the GPU waiting for the host to prepare it) is counted.
		e := p.event()
		p.spans = append(p.spans, span{phase: name, begin: e, end: e})
	}
}

// StopProfile waits for the profiled ops and returns their totals, largest
// first, and stops timing (tensor.Profiler).
func (b *Backend) StopProfile() ([]tensor.OpTime, error) {
	if !b.profiling {
		return nil, nil
	}
	b.profiling = false
	p := b.prof
	if p.used > 0 {
		if err := p.pool[p.used-1].Synchronize(); err != nil {
			return nil, err
		}
	}
	totals := map[[2]string]*tensor.OpTime{}
	add := func(phase, op string, begin, end int, flops float64) error {
		dt, err := p.pool[end].Since(p.pool[begin])
		if err != nil {
			return fmt.Errorf("tensorcuda: profile of %s: %w", op, err)
		}
		k := [2]string{phase, op}
		t := totals[k]
		if t == nil {
			t = &tensor.OpTime{Phase: phase, Op: op}
			totals[k] = t
		}
		t.Calls++
		t.MS += dt.Seconds() * 1e3
		t.FLOPs += flops
		return nil
	}
	// Spans end in the order their ops return (an op within an op ends
	// first); in the order they begin, the stream's time from the last end
	// to the next begin is outside every op.
	slices.SortFunc(p.spans, func(a, b span) int { return cmp.Compare(a.begin, b.begin) })
	last := -1 // the pool index of the latest end so far
	for _, s := range p.spans {
		if s.op != "" { // not a phase's mark
			if err := add(s.phase, s.op, s.begin, s.end, s.flops); err != nil {
				return nil, err
			}
		}
		if last >= 0 && s.begin > last {
			if err := add(s.phase, tensor.BetweenOps, last, s.begin, 0); err != nil {
				return nil, err
			}
		}
		last = max(last, s.end)
	}
	out := make([]tensor.OpTime, 0, len(totals))
	for _, t := range totals {
		out = append(out, *t)
	}
	tensor.SortOpTimes(out)
	return out, nil
}

// event records the pool's next event on the worker's stream and returns
// its index.
func (p *profiler) event() int {
	if p.used == len(p.pool) {
		e, err := p.d.NewEvent()
		must("profile event", err)
		p.pool = append(p.pool, e)
	}
	e := p.pool[p.used]
	must("profile event", e.Record(nil))
	p.used++
	return p.used - 1
}

// span times the op that follows until the returned function is called,
// labelled op with its dims (joined by "x") when the backend is profiling;
// flops are the op's floating-point operations, if it counts them.
//
//	defer b.span("RMSNorm", 0, rows, dim)()
func (b *Backend) span(op string, flops float64, dims ...int) func() {
	if !b.profiling {
		return func() {}
	}
	p := b.prof
	label := op
	if len(dims) > 0 {
		s := make([]string, len(dims))
		for i, d := range dims {
			s[i] = strconv.Itoa(d)
		}
		label += " " + strings.Join(s, "x")
	}
	begin := p.event()
	return func() {
		p.spans = append(p.spans, span{phase: p.phase, op: label, flops: flops, begin: begin, end: p.event()})
	}
}

// gemmLabel names a GEMM by its transposes and its input and output dtypes
// (constant strings: nothing is built when not profiling).
func gemmLabel(transA, transB bool, in, out dtype.DType) string {
	t := gemmTrans(transA, transB)
	var mixed int
	switch {
	case in == dtype.BF16 && out == dtype.F32:
		mixed = 1
	case in == dtype.F32:
		mixed = 2
	}
	return gemmLabels[mixed][t]
}

// gemmAddLabel names a GemmAdd of one dtype by its transposes.
func gemmAddLabel(transA, transB bool, dt dtype.DType) string {
	if dt == dtype.F32 {
		return gemmAddLabels[1][gemmTrans(transA, transB)]
	}
	return gemmAddLabels[0][gemmTrans(transA, transB)]
}

// gemmTrans indexes a row of gemmLabels: NN, NT, TN, TT.
func gemmTrans(transA, transB bool) int {
	t := 0
	if transA {
		t += 2
	}
	if transB {
		t++
	}
	return t
}

var gemmAddLabels = [2][4]string{
	{"GemmAdd NN bf16", "GemmAdd NT bf16", "GemmAdd TN bf16", "GemmAdd TT bf16"},
	{"GemmAdd NN f32", "GemmAdd NT f32", "GemmAdd TN f32", "GemmAdd TT f32"},
}

var gemmLabels = [3][4]string{
	{"Gemm NN bf16", "Gemm NT bf16", "Gemm TN bf16", "Gemm TT bf16"},
	{"Gemm NN bf16->f32", "Gemm NT bf16->f32", "Gemm TN bf16->f32", "Gemm TT bf16->f32"},
	{"Gemm NN f32", "Gemm NT f32", "Gemm TN f32", "Gemm TT f32"},
}

// accLabel is op, or op's accumulating form ("Copy2D (accumulate)"), as a
// constant string.
func accLabel(op string, accumulate bool) string {
	if !accumulate {
		return op
	}
	switch op {
	case "Copy2D":
		return "Copy2D (accumulate)"
	case "Transpose12":
		return "Transpose12 (accumulate)"
	}
	return op + " (accumulate)"
}

// ropeLabel names RoPE's forms as constant strings.
func ropeLabel(inverse, accumulate bool) string {
	switch {
	case inverse && accumulate:
		return "RoPE (inverse, accumulate)"
	case inverse:
		return "RoPE (inverse)"
	case accumulate:
		return "RoPE (accumulate)"
	}
	return "RoPE"
}
