package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"dflash/gpu"
	"dflash/jit"
	"dflash/tensor"
	"dflash/train"
	"dflash/train/traincuda"
)

// trainOnGPU runs train once per rank of place, each on the worker thread
// of its GPU (every CUDA call of a rank comes from it; traincuda.RunRanks):
// the rank's target loaded frozen onto its backend (bf16, a tensor at a time:
// the host never holds the whole model), its drafter with fp32 master
// weights, gradient and AdamW state on the device, and with several ranks
// its NCCL collective. The ranks load one at a time. The trained values of
// this process's first rank's drafter come back to its host arena at the
// end, for the export; its result is the one returned.
func trainOnGPU(ctx context.Context, cfg trainConfig, place traincuda.Placement, load func(tensor.Backend[float32], bool) (rankModels, error),
	run func(rankModels, tensor.Backend[float32], train.Device, train.Collective) (*train.Result, error)) (*train.Result, error) {
	if cfg.SpecEvalEvery > 0 {
		return nil, fmt.Errorf("--spec-eval-every %d with --device cuda: speculative decoding runs on the CPU only for now; set --spec-eval-every 0", cfg.SpecEvalEvery)
	}
	dir, _, err := kernelCacheDir("")
	if err != nil {
		return nil, err
	}
	cache, err := jit.NewNVRTCCache(dir)
	if err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	defer gpu.CloseAll()
	var (
		mu  sync.Mutex // one rank loads at a time
		res *train.Result
	)
	err = traincuda.RunRanks(ctx, cache, place, 0, func(r traincuda.RankEnv) error {
		first := r.Rank == place.Ranks[0]
		if cfg.Deterministic {
			if err := r.Backend.SetDeterministic(); err != nil {
				return err
			}
		}
		mu.Lock()
		m, err := load(r.Backend, first)
		mu.Unlock()
		if err != nil {
			return err
		}
		d := m.sess.Drafter
		d.Arena().Place(r.Backend, true)
		td, err := traincuda.NewDevice(r.Backend, d.Arena(), train.AdamWConfig{Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay})
		if err != nil {
			return err
		}
		m.gauges, m.gpu = deviceGauges(r.Device, cache), r.Device
		rr, err := run(m, r.Backend, td, r.Collective)
		if first {
			res = rr
			d.Arena().Fetch(r.Backend)
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
