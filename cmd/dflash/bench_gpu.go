package main

import (
	"fmt"

	"dflash/gpu"
	"dflash/jit"
	"dflash/tensor/tensorcuda"
)

// onGPU0 runs fn on GPU 0's worker thread with a CUDA tensor backend
// whose kernels go through the cache in cacheDir (an out-of-memory panic
// of the backend returned as fn's error), closes every GPU after, and
// returns GPU 0's name: how the benchmarks get onto a GPU.
func onGPU0(cacheDir string, fn func(d *gpu.Device, b *tensorcuda.Backend) error) (string, error) {
	cache, err := jit.NewNVRTCCache(cacheDir)
	if err != nil {
		return "", fmt.Errorf("--device cuda: %w", err)
	}
	w, err := gpu.Open(0)
	if err != nil {
		return "", fmt.Errorf("--device cuda: %w", err)
	}
	defer gpu.CloseAll()
	err = w.Run(func(d *gpu.Device) (err error) {
		defer tensorcuda.RecoverOOM(&err)
		b, err := tensorcuda.NewBackend(cache, d)
		if err != nil {
			return err
		}
		defer b.Close()
		return fn(d, b)
	})
	return w.Info().Name, err
}
