package decodebench

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"time"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/spec"
	"dflash/tensor"
)

// Env is where the passes run: the backend, how a pass is timed, and what
// the device can tell of itself. CPUEnv is the CPU's; a caller that opens
// a GPU builds its own and calls RunOn on the GPU's worker thread.
type Env struct {
	Backend tensor.Backend[float32]
	// Time runs fn warmup times untimed, then reps times timed, and
	// returns the time of each timed call: gpu.Device.Time on a GPU
	// (events around each call), the host's clock on the CPU.
	Time func(warmup, reps int, fn func() error) (gpu.Timing, error)
	// Timing says how Time times, for the report.
	Timing string
	// Sync waits for the queued work.
	Sync func() error
	// Launches, optional, returns the device's launch count so far
	// (gpu.Device.Launches).
	Launches func() int64
	// HBMPeak, optional, returns the device's peak memory bandwidth in
	// bytes/s and its source (0: unknown, the source says why);
	// Options.HBMPeak overrides it.
	HBMPeak func() (bytesPerS float64, source string)
}

// CPUEnv is the CPU backend b, timed by the host's clock (its ops are done
// when they return). The CPU has no HBM peak: give Options.HBMPeak for
// bounds.
func CPUEnv(b tensor.Backend[float32]) *Env {
	return &Env{Backend: b, Time: hostTime, Timing: "host clock around each call (CPU ops finish before they return)",
		Sync: func() error { return nil }}
}

// hostTime is Env.Time on the host's clock.
func hostTime(warmup, reps int, fn func() error) (gpu.Timing, error) {
	for range warmup {
		if err := fn(); err != nil {
			return gpu.Timing{}, err
		}
	}
	t := gpu.Timing{Samples: make([]time.Duration, 0, reps)}
	for range reps {
		start := time.Now()
		if err := fn(); err != nil {
			return gpu.Timing{}, err
		}
		t.Samples = append(t.Samples, time.Since(start))
	}
	return t, nil
}

// Run runs the benchmark o describes on the CPU (all cores), or plans it
// (DryRun) for any device without opening it (a GPU's peak unknown unless
// given: RunOn plans with one).
func Run(o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.DryRun {
		return RunOn(o, nil)
	}
	if o.Device != "cpu" {
		return nil, fmt.Errorf("decodebench.Run: --device %s runs through RunOn with a device the caller opened", o.Device)
	}
	rep, err := RunOn(o, CPUEnv(tensor.NewCPU[float32](0)))
	if err != nil {
		return nil, err
	}
	rep.Threads = runtime.GOMAXPROCS(0)
	return rep, nil
}

// RunOn runs the benchmark o on env, a device the caller opened (on a GPU:
// from the GPU's worker thread): the target (random weights) and the
// drafter made and placed, a prompt of o.Context random ids prefilled into
// the target's cache and the drafter's context (timed as setup), then for
// each pass o.Warmup and o.Reps timed repetitions, the cache truncated
// back to o.Context after each, and one more counting the launches. With
// o.DryRun it only plans, reading env's HBMPeak when env is not nil.
func RunOn(o Options, env *Env) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o, _ = o.normalized()
	dc := drafterConfig(o)
	if o.DryRun {
		w, kv := deviceDTypes(o.Device)
		rep := newReport(o, dc, w, kv, env)
		rep.Reps, rep.Warmup, rep.DryRun = 0, 0, true
		rep.finish()
		return rep, nil
	}
	b := env.Backend
	slog.Info("bench decode", "device", o.Device, "backend", b.Name(), "target", o.TargetName, "context", o.Context,
		"block_size", o.BlockSize, "drafter_layers", o.DrafterLayers, "taps", dc.TargetLayerIDs)
	start := time.Now()
	target, err := model.New(o.Target, o.Seed)
	if err != nil {
		return nil, fmt.Errorf("--target %s: %w", o.TargetName, err)
	}
	target.Arena().Place(b, false)
	d := dflash.New[float32](dc, rand.New(rand.NewPCG(o.Seed, 0xd4af7)))
	d.Arena().Place(b, false)
	drafter, err := spec.NewDFlash(target, d, b)
	if err != nil {
		return nil, err
	}
	maxLen := o.Context + o.BlockSize
	cache := target.NewCache(b, maxLen)
	defer cache.Free()
	seq := drafter.Start(maxLen)
	defer seq.Free()
	rng := rand.New(rand.NewPCG(o.Seed, 0xdec0de))
	ids := func(n int) []int32 { // any id but the mask token
		x := make([]int32, n)
		for i := range x {
			x[i] = int32(rng.IntN(dc.MaskTokenID))
		}
		return x
	}
	states := make([]int, len(dc.TargetLayerIDs))
	for i, t := range dc.TargetLayerIDs {
		states[i] = t + 1 // the output of layer t is HF hidden state t+1, as spec.Generate asks
	}
	tensor.Scope(b, func() {
		_, hidden := target.Prefill(b, cache, ids(o.Context), states)
		taps := make([]*tensor.Tensor, len(states))
		for i, s := range states {
			taps[i] = hidden[s]
		}
		seq.Extend(taps)
	})
	if err := env.Sync(); err != nil {
		return nil, err
	}
	rep := newReport(o, dc, target.Arena().Compute.DType(), cache.DType(), env)
	rep.SetupMS = msf(time.Since(start))
	rep.Timing = env.Timing

	token, block, last := ids(1), ids(o.BlockSize), ids(1)[0]
	passes := map[string]func(){
		// Greedy, as spec.Generate decodes by default: each pass reads
		// back its rows' argmax ids, not their logits.
		Decode: func() {
			logits, _ := target.Prefill(b, cache, token, nil)
			model.ReadRows(b, logits, true)
		},
		Verify: func() {
			logits, _ := target.Decode(b, cache, block, states) // as spec.Generate verifies, the taps' states with it
			model.ReadRows(b, logits, true)
		},
		Propose: func() { drafter.Propose([]spec.Sequence{seq}, []int32{last}, true) },
	}
	for i := range rep.Phases {
		p := &rep.Phases[i]
		pass := passes[p.Name]
		fn := func() error {
			tensor.Scope(b, pass)
			cache.Truncate(o.Context)
			return nil
		}
		tm, err := env.Time(o.Warmup, o.Reps, fn)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		p.MedianMS, p.MinMS = msf(tm.Median()), msf(tm.Min())
		if env.Launches != nil {
			before := env.Launches()
			if err := fn(); err != nil {
				return nil, err
			}
			p.Launches = env.Launches() - before
		}
		slog.Info("timed", "pass", p.Name, "median_ms", p.MedianMS, "min_ms", p.MinMS, "launches", p.Launches)
	}
	if o.Profile {
		prof, ok := tensor.ProfilerOf(b)
		if !ok {
			return nil, fmt.Errorf("--profile: the %s backend does not time its ops (the CUDA backend does)", b.Name())
		}
		prof.StartProfile()
		for _, p := range rep.Phases {
			prof.ProfilePhase(p.Name)
			tensor.Scope(b, passes[p.Name])
			cache.Truncate(o.Context)
		}
		if rep.Ops, err = prof.StopProfile(); err != nil {
			return nil, fmt.Errorf("--profile: %w", err)
		}
	}
	rep.finish()
	return rep, nil
}

// newReport starts the report of o: the shapes, the passes' bytes for
// weights of w and caches of kv, and the peak memory bandwidth.
func newReport(o Options, dc *dflash.Config, w, kv dtype.DType, env *Env) *Report {
	r := &Report{Device: o.Device, Target: o.TargetName, TargetParams: o.Target.ParamCount(), TargetLayers: o.Target.NumLayers,
		DrafterLayers: dc.NumLayers, Taps: dc.TargetLayerIDs, DrafterParams: dc.ParamCount(), Context: o.Context,
		BlockSize: o.BlockSize, Reps: o.Reps, Warmup: o.Warmup, WeightDType: w.String(), KVDType: kv.String(),
		Phases: passBytes(o, dc, w, kv)}
	r.HBMPeak, r.HBMPeakSource = hbmPeak(o, env)
	return r
}

// hbmPeak returns the peak memory bandwidth (bytes/s) the bounds divide
// by and its source: o.HBMPeak when given, else env's, else unknown (0).
func hbmPeak(o Options, env *Env) (float64, string) {
	switch {
	case o.HBMPeak > 0:
		return o.HBMPeak, "--hbm-peak"
	case env != nil && env.HBMPeak != nil:
		return env.HBMPeak()
	}
	return 0, fmt.Sprintf("unknown (%s: no peak memory bandwidth known here): give --hbm-peak", o.Device)
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
