package gpu

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"dflash/cuda"
)

// gemmCandidates is how many algorithms a plan asks cuBLASLt's heuristic for.
const gemmCandidates = 8

// gemmTuneSample is the GPU time one timed sample of SetGemmTuning's timing
// aims at: products are repeated until an estimate of their time reaches it.
const gemmTuneSample = 2e-3 // seconds

// SetGemmTuning makes the device choose each GEMM plan's algorithm by
// timing. At a plan's first use on the default stream outside a capture and
// a Replay dry run, every candidate of cuBLASLt's heuristic runs the call's
// product on its A and B into scratch C and D from the device's allocator
// (C a copy of the caller's when beta is not 0; the caller's C and D are
// never written), in two interleaved rounds, and the fastest replaces the
// heuristic's first when it is more than 2% faster (pickGemm); at most
// maxTunedSizes sizes of one structure are timed. The choices
// persist in dir/GemmTuneFile (dir "": in memory only), keyed by GPU name,
// cuBLASLt version, workspace size, determinism and spec, so a later
// process takes them without timing. Deterministic GEMMs choose among their
// restricted candidates only. It may come at any time: plans made before
// are tuned at their next use. Set again with the same dir, it keeps the
// device's choices and counts.
func (d *Device) SetGemmTuning(dir string) error {
	if d.tune != nil && d.tune.dir == dir {
		return nil
	}
	ver, err := cuda.CublasLtVersion()
	if err != nil {
		return err
	}
	d.tune = newGemmTuner(dir, d.info.Name, ver)
	return nil
}

// GemmTuneStats says what SetGemmTuning has done on the device so far.
func (d *Device) GemmTuneStats() GemmTuneStats {
	if d.tune == nil {
		return GemmTuneStats{}
	}
	return d.tune.stats
}

// tunePlan chooses p's algorithm for SetGemmTuning, on the call's operands.
func (d *Device) tunePlan(bs *blasState, p *gemmPlan, spec GemmSpec, alpha float32, a, b cuda.DevicePtr, beta float32, c, out cuda.DevicePtr) error {
	p.tuned = true
	if spec.estSeconds() < gemmTuneMin {
		d.tune.stats.Untuned++
		return nil
	}
	algos := make([][8]uint64, len(p.candidates))
	for i, r := range p.candidates {
		copy(algos[i][:], r.Algo.Words())
	}
	key, skey := d.tune.key(bs.wsSize, d.detGemm, spec), d.tune.structKey(bs.wsSize, d.detGemm, spec)
	i, err := d.tune.choose(key, skey, algos, func() ([]float64, error) {
		return d.timeOnScratch(bs, p, spec, alpha, a, b, beta, c, out)
	})
	if err != nil {
		return fmt.Errorf("gpu %d: tuning gemm %+v: %w", d.info.Ordinal, spec, err)
	}
	p.algo = p.candidates[i]
	return nil
}

// timeOnScratch times p's candidates on a and b with C and D in scratch
// buffers straight from the driver (allocDirect: up to a GiB for the LM
// head's logits, neither kept held nor taken from the cache), given back
// when the timing has finished.
func (d *Device) timeOnScratch(bs *blasState, p *gemmPlan, spec GemmSpec, alpha float32, a, b cuda.DevicePtr, beta float32, c, out cuda.DevicePtr) (_ []float64, err error) {
	n := spec.cBytes()
	sc, err := d.alloc.allocDirect(n)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, d.alloc.freeDirect(sc)) }()
	if beta != 0 { // the epilogue reads C: give it the caller's values
		if err := d.CopyAsync(sc, Buffer{Ptr: c, Size: n}, n, nil); err != nil {
			return nil, err
		}
	}
	so := sc
	if out != c {
		if so, err = d.alloc.allocDirect(n); err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, d.alloc.freeDirect(so)) }()
	}
	return d.timeCandidates(bs, p, p.candidates, bs.ws.Ptr, bs.wsSize, alpha, a, b, beta, sc.Ptr, so.Ptr, spec.tuneReps(), 2)
}

// cBytes returns the bytes C spans.
func (s GemmSpec) cBytes() int64 {
	elems := int64(s.Batch-1)*s.StrideC + int64(s.M-1)*int64(s.LDC) + int64(s.N)
	return elems * int64(s.Out.Size())
}

// gemmTuneMin is the estimated time (estSeconds) under which a product
// keeps cuBLASLt's first choice untimed: its launch costs more than any
// choice could gain, and timing it costs the loading of every candidate's
// kernel (tens of ms each at a process's start).
const gemmTuneMin = 2e-6 // seconds

// estSeconds estimates the product's time on a Hopper GPU: its FLOPs at
// 500 TFLOP/s or its operands' bytes at 4 TB/s, whichever is longer.
func (s GemmSpec) estSeconds() float64 {
	m, n, k, b := float64(s.M), float64(s.N), float64(s.K), float64(s.Batch)
	flops := 2 * m * n * k * b / 500e12
	bytes := ((m*k+k*n)*float64(s.In.Size()) + m*n*float64(s.Out.Size())) * b / 4e12
	return max(flops, bytes)
}

// tuneReps returns how many products make one timed sample of about
// gemmTuneSample, estimated at 500 TFLOP/s.
func (s GemmSpec) tuneReps() int {
	est := 2 * float64(s.M) * float64(s.N) * float64(s.K) * float64(s.Batch) / 500e12
	return int(min(50, max(1, math.Ceil(gemmTuneSample/est))))
}

// timeCandidates times each algorithm of cands for p, out =
// alpha·op(A)·op(B) + beta·C with workspace ws of wsSize bytes: one launch
// each first (a candidate whose launch fails gets +Inf; the launch is also
// the warm-up), then rounds interleaved rounds of reps products timed as
// one sample each; a candidate's time is its best round's seconds per
// product. Interleaving spreads clock and temperature drift over all
// candidates. After the first round only the candidates within
// tuneKeepWithin of the fastest run again: the others cannot win.
func (d *Device) timeCandidates(bs *blasState, p *gemmPlan, cands []cuda.HeuristicResult, ws cuda.DevicePtr, wsSize uint64,
	alpha float32, a, b cuda.DevicePtr, beta float32, c, out cuda.DevicePtr, reps, rounds int) ([]float64, error) {
	run := func(i int) error {
		return bs.h.Matmul(p.desc, unsafe.Pointer(&alpha), b, p.a, a, p.b, unsafe.Pointer(&beta), c, p.c, out, p.c,
			&cands[i].Algo, ws, wsSize, d.main.h)
	}
	times := make([]float64, len(cands))
	runnable := make([]bool, len(cands))
	for i := range cands {
		times[i] = math.Inf(1)
		runnable[i] = run(i) == nil
	}
	for r := range rounds {
		if r > 0 {
			best := slices.Min(times)
			for i, t := range times {
				runnable[i] = runnable[i] && t <= tuneKeepWithin*best
			}
		}
		for i := range cands {
			if !runnable[i] {
				continue
			}
			tm, err := d.Time(0, 1, func() error {
				for range reps {
					if err := run(i); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
			times[i] = math.Min(times[i], tm.Samples[0].Seconds()/float64(reps))
		}
	}
	return times, nil
}

// tuneKeepWithin is how much slower than the fastest a candidate may be
// after a round of timeCandidates and still be timed again.
const tuneKeepWithin = 1.15

// pickGemm returns the candidate to use given each one's time: the
// fastest, unless it is not more than 2% faster than the heuristic's first
// (index 0), which then stays, so that timing noise does not replace it.
// ok is false when none ran.
func pickGemm(times []float64) (best int, ok bool) {
	if len(times) == 0 {
		return 0, false
	}
	fastest := 0
	for i, t := range times {
		if t < times[fastest] {
			fastest = i
		}
	}
	if times[fastest] < 0.98*times[0] {
		best = fastest
	}
	return best, !math.IsInf(times[best], 1)
}

// TuneGemm times every heuristic candidate for spec on the given buffers
// (C = A·B, overwriting c; two interleaved rounds of reps products each,
// see timeCandidates) and keeps the one pickGemm picks for later Gemm
// calls. It returns each candidate's seconds per product (+Inf for one that
// cannot run here).
func (d *Device) TuneGemm(spec GemmSpec, a, b, c cuda.DevicePtr, reps int) ([]float64, error) {
	spec, bs, p, err := d.planned("TuneGemm", spec)
	if err != nil {
		return nil, err
	}
	if spec.Scale != ScaleNone {
		return nil, fmt.Errorf("gpu %d: TuneGemm of FP8 %+v: FP8 products are timed by SetGemmTuning at a GemmFP8 call, which has their scales", d.info.Ordinal, spec)
	}
	times, err := d.timeCandidates(bs, p, p.candidates, bs.ws.Ptr, bs.wsSize, 1, a, b, 0, c, c, reps, 2)
	if err != nil {
		return nil, err
	}
	best, ok := pickGemm(times)
	if !ok {
		return times, fmt.Errorf("gpu %d: no cuBLASLt candidate ran for %+v", d.info.Ordinal, spec)
	}
	p.algo, p.tuned = p.candidates[best], true
	return times, nil
}

// TimeGemmCandidates times every candidate cuBLASLt's heuristic offers for
// spec with a workspace of the given bytes (0: the device's), as
// out = op(A)·op(B) + beta·C on the given buffers (out is c or does not
// overlap it), in rounds interleaved rounds of reps products each (see
// timeCandidates). It returns each candidate's seconds per product, the
// heuristic's first at index 0, +Inf for one that cannot run. The device's
// plans keep their algorithms.
func (d *Device) TimeGemmCandidates(spec GemmSpec, workspace int64, beta float32, a, b, c, out cuda.DevicePtr, rounds, reps int) (_ []float64, err error) {
	spec, bs, p, err := d.planned("TimeGemmCandidates", spec)
	if err != nil {
		return nil, err
	}
	if spec.Scale != ScaleNone {
		return nil, fmt.Errorf("gpu %d: TimeGemmCandidates of FP8 %+v: FP8 products are timed by SetGemmTuning at a GemmFP8 call, which has their scales", d.info.Ordinal, spec)
	}
	if workspace == 0 || uint64(workspace) == bs.wsSize {
		return d.timeCandidates(bs, p, p.candidates, bs.ws.Ptr, bs.wsSize, 1, a, b, beta, c, out, reps, rounds)
	}
	pref, err := d.gemmPreference(uint64(workspace))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, pref.Destroy()) }()
	cands, err := bs.h.Heuristics(p.desc, p.a, p.b, p.c, p.c, pref, gemmCandidates)
	if err != nil {
		return nil, err
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("gpu %d: cuBLASLt has no algorithm for %+v with a %d-byte workspace", d.info.Ordinal, spec, workspace)
	}
	ws, err := d.alloc.Alloc(workspace)
	if err != nil {
		return nil, err
	}
	defer d.alloc.Free(ws)
	return d.timeCandidates(bs, p, cands, ws.Ptr, uint64(workspace), 1, a, b, beta, c, out, reps, rounds)
}
