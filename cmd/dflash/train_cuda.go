package main

import (
	"fmt"

	"dflash/gpu"
	"dflash/jit"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
	"dflash/tensor/tensorcuda"
	"dflash/train"
)

// trainOnGPU runs train on GPU 0's worker thread (every CUDA call of the
// run comes from it): the target placed frozen (bf16), the drafter with its
// fp32 master weights, gradient and AdamW state on the device. The trained
// values come back to the drafter's host arena at the end, for the export.
func trainOnGPU(target *model.Model, d *dflash.Drafter[float32], cfg trainConfig,
	run func(tensor.Backend[float32], train.Device) (*train.Result, error)) (*train.Result, error) {
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
	w, err := gpu.Open(0)
	if err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	defer gpu.CloseAll()
	var res *train.Result
	err = w.Run(func(dev *gpu.Device) (err error) {
		defer tensorcuda.RecoverOOM(&err)
		b, err := tensorcuda.NewBackend(cache, dev)
		if err != nil {
			return err
		}
		defer b.Close()
		target.Arena().Place(b, false)
		d.Arena().Place(b, true)
		td, err := tensorcuda.NewTrainDevice(b, d.Arena(), train.AdamWConfig{Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay})
		if err != nil {
			return err
		}
		res, err = run(b, td)
		d.Arena().Fetch(b)
		return err
	})
	return res, err
}
