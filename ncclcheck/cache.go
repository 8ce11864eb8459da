package ncclcheck

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/jit"
	"dflash/kernels"
)

// CacheTarget is a device the kernel-cache check asks for a kernel on.
type CacheTarget interface {
	Name() string // for messages, e.g. "gpu 1 (NVIDIA H200)"
	Arch() string // the kernel's target, e.g. "sm_90"
	// Run runs fn on the device's own thread with its context's loader.
	Run(fn func(l jit.Loader) error) error
}

// CacheResult is the outcome of the kernel-cache check.
type CacheResult struct {
	Kernel      string   `json:"kernel"`
	Devices     []string `json:"devices"`
	Archs       int      `json:"distinct_archs"`
	Compiles    int64    `json:"compiles"`     // want Archs: one per distinct target
	ModuleLoads int64    `json:"module_loads"` // want one per device
	Waits       int64    `json:"waits"`        // requests that waited for another's compile
	CompileMS   float64  `json:"compile_ms"`
	Launched    bool     `json:"launched"` // every device ran the kernel with an exact result
	Pass        bool     `json:"pass"`
	Detail      string   `json:"detail"`
}

// KernelCache asks cache for src's kernel fn on every target at the same
// moment (each from its own device thread, released together), then runs
// use with the function on each, and checks the cache's counters: one
// compile per distinct arch, one module load per device. cache should be
// fresh (memory-only) so that nothing was compiled or loaded before.
func KernelCache(ctx context.Context, cache *jit.Cache, src jit.Source, fn string, targets []CacheTarget,
	use func(l jit.Loader, f cuda.Function) error) (CacheResult, error) {
	res := CacheResult{Kernel: fmt.Sprintf("%s:%s", src.ProgramName(), fn)}
	archs := map[string]bool{}
	for _, t := range targets {
		res.Devices = append(res.Devices, t.Name())
		archs[t.Arch()] = true
	}
	res.Archs = len(archs)
	before := cache.Stats()
	var ready sync.WaitGroup
	ready.Add(len(targets))
	start := make(chan struct{})
	errs := make([]error, len(targets))
	var done sync.WaitGroup
	for i, t := range targets {
		done.Go(func() {
			s := src
			s.Arch = t.Arch()
			atGate := sync.OnceFunc(ready.Done) // also when Run fails before calling fn
			defer atGate()
			errs[i] = t.Run(func(l jit.Loader) error {
				atGate()
				<-start
				img, err := cache.Get(ctx, s)
				if err != nil {
					return err
				}
				f, err := img.Function(l, fn)
				if err != nil {
					return err
				}
				return use(l, f)
			})
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", t.Name(), errs[i])
			}
		})
	}
	ready.Wait() // every target's thread is at the gate
	close(start)
	done.Wait()
	after := cache.Stats()
	res.Compiles = after.Compiles - before.Compiles
	res.ModuleLoads = after.ModuleLoads - before.ModuleLoads
	res.Waits = after.Waits - before.Waits
	res.CompileMS = float64((after.CompileTime - before.CompileTime).Microseconds()) / 1e3
	if err := errors.Join(errs...); err != nil {
		res.Detail = err.Error()
		return res, err
	}
	res.Launched = true
	res.Pass = res.Compiles == int64(res.Archs) && res.ModuleLoads == int64(len(targets))
	res.Detail = fmt.Sprintf("%d devices asked at once: %d compiles (want %d), %d module loads (want %d), %d waited for the compile",
		len(targets), res.Compiles, res.Archs, res.ModuleLoads, len(targets), res.Waits)
	return res, nil
}

// workerTarget is a GPU worker as a CacheTarget.
type workerTarget struct{ w *gpu.Worker }

func (t workerTarget) Name() string {
	return fmt.Sprintf("gpu %d (%s)", t.w.Ordinal(), t.w.Info().Name)
}
func (t workerTarget) Arch() string { return t.w.Info().Arch() }
func (t workerTarget) Run(fn func(l jit.Loader) error) error {
	return t.w.Run(func(d *gpu.Device) error { return fn(d) })
}

// SaxpySource is the kernel the GPU cache check compiles (kernels/saxpy.cu)
// under a family of its own.
func SaxpySource() jit.Source {
	return jit.Source{Family: "nccl_check_saxpy", Name: "saxpy.cu", Code: kernels.Source("saxpy.cu")}
}

// KernelCacheWorkers runs KernelCache on GPU workers with a fresh
// memory-only NVRTC cache and the saxpy kernel, launching it on each device
// and checking y = 3x + y exactly.
func KernelCacheWorkers(ctx context.Context, workers []*gpu.Worker) (CacheResult, error) {
	cache, err := jit.NewNVRTCCache("")
	if err != nil {
		return CacheResult{Detail: err.Error()}, err
	}
	targets := make([]CacheTarget, len(workers))
	for i, w := range workers {
		targets[i] = workerTarget{w}
	}
	return KernelCache(ctx, cache, SaxpySource(), "saxpy", targets, func(l jit.Loader, f cuda.Function) error {
		return runSaxpy(l.(*gpu.Device), f)
	})
}

// runSaxpy launches saxpy with a = 3 on x_i = 1 + i mod 7, y_i = 1 + i mod 5
// (exact in fp32) and checks every element of y.
func runSaxpy(d *gpu.Device, f cuda.Function) error {
	const n = 1 << 16
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(1+i%7), float32(1+i%5)
	}
	got, err := gpu.Saxpy(d, f, 3, x, y)
	if err != nil {
		return err
	}
	for i := range got {
		if want := 3*x[i] + y[i]; got[i] != want {
			return fmt.Errorf("saxpy on gpu %d: y[%d] = %g, want %g", d.Ordinal(), i, got[i], want)
		}
	}
	return nil
}
