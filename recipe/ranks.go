package recipe

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"dflash/gpu"
	"dflash/jit"
	"dflash/model/dflash"
	"dflash/spec"
	"dflash/tensor"
	"dflash/train"
	"dflash/train/traincuda"
)

// placement returns the ranks this process trains (one per GPU of --gpus,
// or this process's rank of a multi-process job), refusing several ranks
// anywhere but on CUDA.
func placement(s *Spec) (traincuda.Placement, error) {
	if s.Device != "cuda" {
		if s.GPUs != "" {
			return traincuda.Placement{}, fmt.Errorf("%s %q needs --device cuda", s.source("gpus"), s.GPUs)
		}
		if s.Launch.WorldSize > 1 {
			return traincuda.Placement{}, fmt.Errorf("world size %d with --device %s: a job of several ranks trains on GPUs (--device cuda, NCCL)", s.Launch.WorldSize, s.Device)
		}
		return traincuda.Placement{Ranks: []int{0}, World: 1}, nil
	}
	gpus, err := gpu.ParseOrdinals(s.source("gpus"), s.GPUs, gpu.Count)
	if err != nil {
		return traincuda.Placement{}, err
	}
	return traincuda.PlaceRanks(gpus, s.Launch, s.source("gpus"))
}

// rankEnv is where one rank trains.
type rankEnv struct {
	backend tensor.Backend[float32]
	// cuda is the rank's GPU, its CUDA backend and collective; nil on the
	// CPU.
	cuda *traincuda.RankEnv
	// gauges, optional, reads the rank's device after each step
	// (train.Hooks.Gauges).
	gauges func() map[string]float64
	// first marks this process's first rank, whose session is the lead's.
	first bool
	// loading, when not nil, is held while the rank loads its target (the
	// ranks of a process load one at a time).
	loading *sync.Mutex
	// kernels is the process's kernel cache on CUDA (its counts go into the
	// start line); nil on the CPU.
	kernels *jit.Cache
}

// trainRank trains one rank: it loads the target onto the rank's backend
// (on a GPU straight into device memory, the shards' bytes in pieces: the
// host never holds the whole model) while the kernels compile
// (loadTarget) and the rank's drafter gets its values (the lead's session
// for the first rank, else a new replica, newSession), places the drafter's
// training state on the rank's device while the kernels may still compile,
// loads them and runs train.Run. The session keeps the
// evaluation cache where it fits (checkMemory, checkDeviceMemory), given
// back when trainRank returns. The first rank logs where the time to its
// first step went (startClock) at that step's record.
func (j *job) trainRank(ctx context.Context, r rankEnv) (*train.Result, error) {
	s := &j.spec
	clock := &startClock{prepare: j.prepared, prepared: j.preparedAt, rank: time.Now(), hasDevice: r.cuda != nil}
	evalCache := j.evalCache
	if r.cuda != nil {
		var err error
		if evalCache, err = j.checkDeviceMemory(r.cuda.Device, r.cuda.Rank == 0); err != nil {
			return nil, err
		}
	}
	sess, ready := j.lead, j.leadReady
	if !r.first {
		sess, ready = j.newSession()
	}
	target, compiled, err := j.loadTarget(ctx, r, clock)
	if err != nil {
		return nil, err
	}
	t := time.Now()
	ready() // the drafter's values, made while the target loaded: what is left counts as placing it
	sess.EvalCache = evalCache
	fetch := placeDrafter(r, sess.Drafter)
	sess.Backend = r.backend
	defer sess.Free()
	clock.drafter = time.Since(t)
	// Every kernel before the first step: a compile failure is the run's
	// error, naming the kernel, before train.Run writes anything (on a GPU
	// loadTarget compiles them; Prepare loads them).
	t = time.Now()
	if err := compiled(); err != nil {
		return nil, err
	}
	if err := r.backend.Prepare(ctx, append(target.ForwardAttentions(sess.Pack != nil), sess.Drafter.StepAttentions()...)); err != nil {
		return nil, err
	}
	clock.kernels = time.Since(t)
	t = time.Now()
	sess.Head, sess.Hidden = dflash.HeadOf(target), dflash.TargetHidden(target, j.dc.TargetLayerIDs, r.backend)
	if s.SpecEvalEvery > 0 {
		if sess.SpecEval, err = spec.EvalFunc(r.backend, target, sess.Drafter, sess.Eval, s.SpecPrompts, s.SpecMaxNewTokens); err != nil {
			return nil, err
		}
	}
	var g *gpu.Device
	var coll train.Collective
	if r.cuda != nil {
		g, coll = r.cuda.Device, r.cuda.Collective
	}
	peak, source := MFUPeak(s.PeakTFLOPS, g, s.Workers)
	if r.first {
		slog.Info("mfu peak", "mfu_peak_tflops", peak, "mfu_peak_source", source)
	}
	hooks := Hooks(sess, coll)
	hooks.Identity, hooks.PeakTFLOPS, hooks.Gauges = j.id, peak, r.gauges
	clock.drafter += time.Since(t)
	if r.first {
		hooks.Gauges = clock.gauges(r, r.gauges)
	}
	clock.run = time.Now()
	if r.cuda != nil {
		clock.allocRun = r.cuda.Device.AllocStats()
	}
	res, err := train.Run(ctx, s.Config, hooks)
	if r.first {
		fetch()
	}
	return res, err
}

// placeDrafter places d's parameters on the rank's backend with master
// values (on a GPU: fp32 masters beside the bf16 compute copy; the
// gradients and the AdamW state train.Params allocates there too) and
// returns fetch, which brings the trained values back to d's host arena for
// the export. On the CPU nothing moves.
func placeDrafter(r rankEnv, d *dflash.Drafter[float32]) (fetch func()) {
	d.Arena().Place(r.backend, true)
	return func() { d.Arena().Fetch(r.backend) }
}

// trainOnGPUs trains every rank of the placement at once, each on the
// worker thread of its GPU (every CUDA call of a rank comes from it;
// traincuda.RunRanks) with kernels through the process's kernel cache: the
// rank's target frozen in bf16, its drafter with bf16 activations and
// compute weights, fp32 master weights, gradients and AdamW state on the
// device, and with several ranks its NCCL collective. The ranks load one
// at a time. It returns the result of this process's first rank.
func (j *job) trainOnGPUs(ctx context.Context) (*train.Result, error) {
	s := &j.spec
	dir, _, err := jit.DefaultDir()
	if err != nil {
		return nil, err
	}
	cache, err := jit.NewNVRTCCache(dir)
	if err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	defer gpu.CloseAll()
	var (
		loading sync.Mutex
		res     *train.Result
	)
	err = traincuda.RunRanks(ctx, cache, j.place, 0, func(r traincuda.RankEnv) error {
		if s.Deterministic {
			if err := r.Backend.SetDeterministic(); err != nil {
				return err
			}
		}
		first := r.Rank == j.place.Ranks[0]
		rr, err := j.trainRank(ctx, rankEnv{backend: r.Backend, cuda: &r, gauges: deviceGauges(r.Device, cache), first: first, loading: &loading,
			kernels: cache})
		if first {
			res = rr
		}
		return err
	})
	if err != nil {
		err = fmt.Errorf("--device cuda: %w", err)
	}
	st := cache.Stats()
	slog.Info("kernel cache", "compiles", st.Compiles, "compile_errors", st.CompileErrors, "disk_hits", st.DiskHits,
		"kernels", st.Kernels, "compile_time", st.CompileTime.Round(time.Millisecond), "dir", dir)
	return res, err
}

// deviceGauges reads, after each step, the device memory that d's
// allocator holds in live buffers and mapped ranges (the step arena's)
// and at its peak (cached blocks included), and the compiles of the
// process's kernel cache so far.
func deviceGauges(d *gpu.Device, cache *jit.Cache) func() map[string]float64 {
	return func() map[string]float64 {
		a := d.AllocStats()
		return map[string]float64{"device_mem_bytes": float64(a.InUseBytes + a.MappedBytes), "device_mem_peak_bytes": float64(a.PeakBytes),
			"compiles": float64(cache.Stats().Compiles)}
	}
}
