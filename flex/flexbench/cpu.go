package flexbench

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"time"

	"dflash/dtype"
	"dflash/flex"
	"dflash/gpu"
)

// runCPU times package flex's block-sparse attention, and with o.Dense the
// dense masked reference on the same inputs, on all cores.
func runCPU(o Options) (*Report, error) {
	r := newCaseRand(o.Seed)
	pc, err := o.problem(r)
	if err != nil {
		return nil, err
	}
	d := pc.dims
	rep := pc.newReport(o)
	rep.Threads = runtime.GOMAXPROCS(0)
	slog.Info("bench attention", "mask", o.Mask, "dims", fmt.Sprintf("%+v", d), "dtype", o.DType, "threads", rep.Threads)

	bm, err := measureBlockMask(pc.mask, pc.args, d, o.Block, &rep.BlockMask)
	if err != nil {
		return nil, err
	}
	rep.BlockDensity = bm.Density()
	if o.Mask == "dflash" && o.FullSizeMask {
		fo := o
		fo.Batch, fo.Heads, fo.KVHeads, fo.Anchors, fo.BlockSize, fo.Context, fo.HeadDim = 1, 32, 8, 512, 16, 3072, 128
		fc, err := fo.problem(r)
		if err != nil {
			return nil, err
		}
		rep.DFlashFullSize = &BlockMask{}
		if _, err := measureBlockMask(fc.mask, fc.args, fc.dims, kvBlock, rep.DFlashFullSize); err != nil {
			return nil, err
		}
	}
	var dm *flex.DenseMask
	if o.Dense {
		start := time.Now()
		if dm, err = flex.NewDenseMask(pc.mask, pc.args, d, 4<<30); err != nil {
			return nil, err
		}
		rep.Dense = &Dense{MaskMS: msf(time.Since(start))}
	}
	if o.DType == dtype.F64 {
		runPasses[float64](rep, o, d, bm, dm, r)
	} else {
		runPasses[float32](rep, o, d, bm, dm, r)
	}
	rep.finish()
	if dn := rep.Dense; dn != nil {
		dn.ForwardSpeedup = dn.ForwardMS / rep.ForwardMS
		if rep.FwdBwdMS > 0 {
			dn.FwdBwdSpeedup = dn.FwdBwdMS / rep.FwdBwdMS
		}
	}
	return rep, nil
}

// measureBlockMask builds the block mask, and once more with exact
// classification, and describes both builds in rep.
func measureBlockMask(prog *flex.MaskProgram, args *flex.Args, d flex.Dims, block int, rep *BlockMask) (*flex.BlockMask, error) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	bm, err := flex.NewBlockMask(prog, args, d, block, kvBlock)
	if err != nil {
		return nil, err
	}
	runtime.ReadMemStats(&m1)
	st := bm.Stats
	total := float64(st.Empty + st.Partial + st.Full)
	*rep = BlockMask{Source: "cpu", CPUBuildMS: msf(st.Build), ListsMatch: true, Blocks: int(total), Partial: st.Partial,
		Full: st.Full, Empty: st.Empty, IndexBytes: st.Bytes, AllocBytes: m1.TotalAlloc - m0.TotalAlloc,
		IntervalPartialFraction: float64(st.IntervalPartial) / total}
	ex, err := flex.NewBlockMask(prog, args, d, block, kvBlock, flex.Exact())
	if err != nil {
		return nil, err
	}
	rep.ExactPartialFraction = float64(ex.Stats.Partial) / total
	rep.ExactBuildMS = msf(ex.Stats.Build)
	slog.Info("block mask", "dims", fmt.Sprintf("%+v", d), "build_ms", rep.CPUBuildMS, "partial", float64(st.Partial)/total,
		"interval_partial", rep.IntervalPartialFraction, "exact_partial", rep.ExactPartialFraction)
	return bm, nil
}

// runPasses times the sparse passes (and the dense ones when dm is not nil)
// on standard normal inputs: the median of o.Reps forward and o.RepsFB
// forward+backward passes after o.Warmup untimed ones.
func runPasses[T float32 | float64](rep *Report, o Options, d flex.Dims, bm *flex.BlockMask, dm *flex.DenseMask, r *rand.Rand) {
	gen := func(n int) []T {
		x := make([]T, n)
		for i := range x {
			x[i] = T(r.NormFloat64())
		}
		return x
	}
	q := gen(d.Batch * d.HeadsQ * d.LenQ * d.HeadDim)
	k := gen(d.Batch * d.HeadsKV * d.LenKV * d.HeadDim)
	v := gen(len(k))
	dout := gen(len(q))
	scale := 1 / math.Sqrt(float64(d.HeadDim))
	var so, do []T
	var sg, dg flex.Grads[T]
	sparseF := func() { so, _ = flex.Forward(d, q, k, v, bm, nil, nil, scale) }
	sparseFB := func() {
		out, lse := flex.Forward(d, q, k, v, bm, nil, nil, scale)
		sg = flex.Backward(d, q, k, v, out, lse, dout, bm, nil, nil, scale)
	}
	rep.ForwardMS = medianWall(o.Warmup, o.Reps, sparseF)
	if !o.ForwardOnly {
		rep.FwdBwdMS = medianWall(o.Warmup, o.RepsFB, sparseFB)
	} else {
		rep.Reps[1] = 0
	}
	slog.Info("timed sparse", "forward_ms", rep.ForwardMS, "fb_ms", rep.FwdBwdMS)
	if dm == nil {
		return
	}
	dn := rep.Dense
	dn.ForwardMS = medianWall(o.Warmup, o.Reps, func() { do, _ = flex.DenseForward(d, q, k, v, dm, nil, nil, scale) })
	dn.ForwardMaxDiff = maxAbsDiff(so, do)
	if !o.ForwardOnly {
		dn.FwdBwdMS = medianWall(o.Warmup, o.RepsFB, func() {
			out, lse := flex.DenseForward(d, q, k, v, dm, nil, nil, scale)
			dg = flex.DenseBackward(d, q, k, v, out, lse, dout, dm, nil, nil, scale)
		})
		dn.FwdBwdMaxDiff = max(maxAbsDiff(sg.DQ, dg.DQ), maxAbsDiff(sg.DK, dg.DK), maxAbsDiff(sg.DV, dg.DV))
	}
	slog.Info("timed dense", "forward_ms", dn.ForwardMS, "fb_ms", dn.FwdBwdMS)
}

// medianWall returns the median wall time of reps calls of f, in ms, after
// warmup untimed calls: the CPU counterpart of gpu.Device.Time.
func medianWall(warmup, reps int, f func()) float64 {
	for range warmup {
		f()
	}
	var tm gpu.Timing
	for range reps {
		s := time.Now()
		f()
		tm.Samples = append(tm.Samples, time.Since(s))
	}
	return msf(tm.Median())
}

func maxAbsDiff[T float32 | float64](a, b []T) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}
