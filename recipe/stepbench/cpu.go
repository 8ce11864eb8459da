package stepbench

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"time"

	"dflash/internal/cpufeat"
	"dflash/model/dflash"
	"dflash/tensor"
)

// heapPeriod is how often the heap's high-water mark is sampled.
const heapPeriod = 5 * time.Millisecond

// runCPU runs o.Warmup and then o.Steps timed steps on the CPU backend
// (float32, all cores) and reports their means.
func runCPU(o Options) (*Report, error) {
	dc := drafterConfig(o)
	mem := estimateMemory(o, dc)
	if err := checkMemory(o, dc, mem); err != nil {
		return nil, err
	}
	if avail, ok := availableMemory(); ok && debug.SetMemoryLimit(-1) == math.MaxInt64 {
		// Let the GC collect before the host runs out rather than at twice
		// the live heap (GOGC), unless GOMEMLIMIT chose a limit.
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(avail)))
	}
	env := CPUEnv(tensor.NewCPU[float32](0))
	rep := newReport(o, dc, mem, env)
	rep.Threads = runtime.GOMAXPROCS(0)
	slog.Info("bench step", "device", "cpu", "target", o.TargetName, "taps", dc.TargetLayerIDs, "drafter_layers", o.DrafterLayers,
		"seq_len", o.SeqLen, "batch", o.Batch, "anchors", o.Anchors, "memory_estimate_GiB", mem.Total()/(1<<30))
	s, err := newStepper(o, dc, env)
	if err != nil {
		return nil, err
	}
	if err := s.warm(); err != nil {
		return nil, err
	}
	runtime.GC()
	s.heap = startHeapPeak(heapPeriod)
	steps, walls, err := s.timed()
	rep.PeakHeapBytes, rep.PeakLiveBytes = s.heap.finish()
	if err != nil {
		return nil, err
	}
	rep.PeakRSSBytes = peakRSS()
	rep.finish(steps, walls)
	return rep, nil
}

// warm runs the o.Warmup untimed steps.
func (s *stepper) warm() error {
	for i := range s.o.Warmup {
		start := time.Now()
		if _, err := s.step(); err != nil {
			return err
		}
		slog.Info("warm-up step", "i", i+1, "of", s.o.Warmup, "ms", msf(time.Since(start)))
	}
	return nil
}

// timed runs the o.Steps timed steps and returns them with their wall times.
func (s *stepper) timed() ([]stepResult, []time.Duration, error) {
	var steps []stepResult
	var walls []time.Duration
	for i := range s.o.Steps {
		start := time.Now()
		r, err := s.step()
		if err != nil {
			return nil, nil, err
		}
		steps, walls = append(steps, r), append(walls, r.end.Sub(start))
		queued := make([]float64, len(r.queued))
		for j, d := range r.queued {
			queued[j] = msf(d)
		}
		slog.Info("timed step", "i", i+1, "of", s.o.Steps, "ms", msf(walls[i]), "loss", r.loss, "host_ms_by_phase", queued)
	}
	return steps, walls, nil
}

// profile runs one more step with every op timed by the backend (a
// tensor.Profiler) and returns the op times of that step.
func (s *stepper) profile() ([]tensor.OpTime, error) {
	p, ok := tensor.ProfilerOf(s.dev.Backend)
	if !ok {
		return nil, fmt.Errorf("--profile: the %s backend does not time its ops (the CUDA backend does)", s.dev.Backend.Name())
	}
	p.StartProfile()
	_, err := s.step()
	ops, perr := p.StopProfile()
	if err != nil {
		return nil, err
	}
	if perr != nil {
		return nil, fmt.Errorf("--profile: %w", perr)
	}
	return ops, nil
}

// plan returns the report of o without running it: the shapes, the memory
// estimate and the FLOPs of one step with anchors drawn from o.Seed.
func plan(o Options) *Report {
	dc := drafterConfig(o)
	rep := newReport(o, dc, estimateMemory(o, dc), nil)
	rep.Steps, rep.Warmup = 0, 0
	rng := rand.New(rand.NewPCG(o.Seed, 0x57e9))
	ex, rows := examples(o, dc, rng)
	b := dflash.MakeBatch(ex, rows, 0)
	rep.FLOPs = dflash.StepFLOPs(&o.Target, dc, b, dflash.BuildBlocks(dc, b, dflash.SampleBatchAnchors(rng, b, o.Anchors)))
	return rep
}

// newReport starts the report of o on env (nil: a dry run): the shapes,
// parameter counts, the memory estimate and the peak FLOP rate.
func newReport(o Options, dc *dflash.Config, mem dflash.Memory, env *Env) *Report {
	t := &o.Target
	r := &Report{Device: o.Device, Target: o.TargetName, TargetParams: t.ParamCount(),
		TargetShape: Shape{Hidden: t.HiddenSize, Intermediate: t.IntermediateSize, Layers: t.NumLayers, Heads: t.NumHeads,
			KVHeads: t.NumKVHeads, HeadDim: t.HeadDim, Vocab: t.VocabSize, Tied: t.TieWordEmbeddings},
		TargetLayers: slices.Max(dc.TargetLayerIDs) + 1, Taps: dc.TargetLayerIDs, DrafterLayers: dc.NumLayers,
		DrafterParams: dc.ParamCount(), SeqLen: o.SeqLen, Batch: o.Batch, Anchors: o.Anchors, BlockSize: o.BlockSize, LossChunk: o.LossChunk,
		Steps: o.Steps, Warmup: o.Warmup, Memory: mem, DrafterOnly: o.DrafterOnly, TargetDType: "bf16"}
	if o.TargetFP8 {
		r.TargetDType = "fp8"
	}
	r.PeakTFLOPS, r.PeakSource = peak(o, env)
	return r
}

// peak returns the peak FLOP rate (TFLOP/s) the MFU divides by and its
// source: o.PeakTFLOPS when given, else env's; a dry run (env nil) reads
// this CPU's on the CPU and, opening no GPU, leaves a GPU's unknown (0).
func peak(o Options, env *Env) (tflops float64, source string) {
	switch {
	case o.PeakTFLOPS > 0:
		return o.PeakTFLOPS, "--peak-tflops"
	case env != nil && env.Peak != nil:
		return env.Peak()
	case env == nil && o.Device == "cpu":
		return cpufeat.PeakTFLOPS(runtime.GOMAXPROCS(0))
	}
	return 0, fmt.Sprintf("unknown (%s opened no device to read it from): give --peak-tflops", o.Device)
}

// finish fills the means, rates and MFU from the timed steps and their
// wall times.
func (r *Report) finish(steps []stepResult, walls []time.Duration) {
	n := float64(len(steps))
	var ph [NumPhases]float64
	var mask float64
	for i, s := range steps {
		for j, d := range s.phases {
			ph[j] += msf(d) / n
		}
		for _, k := range s.replays {
			if r.Replays == nil {
				r.Replays = map[string]int{}
			}
			r.Replays[k]++
		}
		mask += msf(s.blockMask) / n
		r.FLOPs.TargetForward += s.flops.TargetForward / n
		r.FLOPs.DrafterForward += s.flops.DrafterForward / n
		r.FLOPs.DrafterBackward += s.flops.DrafterBackward / n
		r.StepMS += msf(walls[i]) / n
		r.Loss = s.loss
	}
	r.Phases = Phases{InputAssembly: ph[0], TargetForward: ph[1], DrafterForward: ph[2], Backward: ph[3], Optimizer: ph[4]}
	r.BlockMaskMS = mask
	r.MinMS, r.MaxMS = msf(slices.Min(walls)), msf(slices.Max(walls))
	sec := r.StepMS / 1e3
	r.TokensPerS = float64(r.Batch*r.SeqLen) / sec
	r.SamplesPerS = float64(r.Batch) / sec
	mfu := func(flops, ms float64) float64 {
		if ms <= 0 || r.PeakTFLOPS <= 0 {
			return 0
		}
		return flops / (ms / 1e3) / (r.PeakTFLOPS * 1e12)
	}
	r.MFU = MFU{Step: mfu(r.FLOPs.Total(), r.StepMS), TargetForward: mfu(r.FLOPs.TargetForward, r.Phases.TargetForward),
		DrafterTrain: mfu(r.FLOPs.DrafterForward+r.FLOPs.DrafterBackward, r.Phases.DrafterForward+r.Phases.Backward)}
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
