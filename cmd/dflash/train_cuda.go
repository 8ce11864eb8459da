package main

import (
	"context"
	"fmt"
	"sync"

	"dflash/gpu"
	"dflash/jit"
	"dflash/tensor"
	"dflash/tensor/tensorcuda"
	"dflash/train"
)

// trainOnGPU runs train once per rank of place, each on the worker thread
// of its GPU (every CUDA call of a rank comes from it; tensorcuda.RunRanks):
// the rank's target placed frozen (bf16), its drafter with fp32 master
// weights, gradient and AdamW state on the device, and with several ranks
// its NCCL collective. This process's first rank trains first (the models
// already loaded); the others load replicas, one at a time (one host copy
// of the target at once). The trained values of the first rank's drafter
// come back to its host arena at the end, for the export; its result is
// the one returned.
func trainOnGPU(ctx context.Context, cfg trainConfig, place tensorcuda.Placement, first rankModels, replica func() (rankModels, error),
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
		mu  sync.Mutex // one replica loaded at a time
		res *train.Result
	)
	err = tensorcuda.RunRanks(ctx, cache, place, 0, func(r tensorcuda.RankEnv) error {
		m, lead := first, r.Rank == place.Ranks[0]
		if !lead {
			mu.Lock()
			var err error
			if m, err = replica(); err == nil {
				m.target.Arena().Place(r.Backend, false)
			}
			mu.Unlock()
			if err != nil {
				return err
			}
		} else {
			m.target.Arena().Place(r.Backend, false)
		}
		d := m.sess.Drafter
		d.Arena().Place(r.Backend, true)
		td, err := tensorcuda.NewTrainDevice(r.Backend, d.Arena(), train.AdamWConfig{Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay})
		if err != nil {
			return err
		}
		rr, err := run(m, r.Backend, td, r.Collective)
		if lead {
			res = rr
			d.Arena().Fetch(r.Backend)
		}
		return err
	})
	if err != nil {
		err = fmt.Errorf("--device cuda: %w", err)
	}
	return res, err
}
