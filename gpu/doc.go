// Package gpu drives NVIDIA GPUs with one worker per GPU (contract 1 of the
// design): a goroutine locked to its OS thread with the GPU's primary
// context current. Every CUDA call for that GPU runs on it.
//
//	w, err := gpu.Open(0)          // or gpu.Workers() for every GPU
//	err = w.Run(func(d *gpu.Device) error {
//		buf, err := d.Alloc(1 << 20) // caching allocator
//		...
//		return d.Launch(fn, grid, block, 0, nil, args)
//	})
//	job := w.Submit(func(d *gpu.Device) error { ... }) // asynchronous
//	err = job.Wait()
//
// Training code for a GPU is the function given to Run: it runs on the
// worker thread with no per-call channel hop. Submit queues small jobs from
// other goroutines; jobs of one worker run one at a time, in order. A job
// that panics re-panics in the goroutine that waits for it.
//
// A *Device is valid only inside the worker's functions. In debug mode
// (SetDebug(true), or DFLASH_GPU_DEBUG=1 in the environment) every CUDA call
// made through package cuda from a thread that is not a GPU worker, and every
// Device method called off its own worker's thread, fails with a
// *ForeignThreadError instead of reaching the driver.
//
// Each device has a caching allocator (size classes, reuse across steps,
// statistics, Release on demand; an out-of-memory error reports the bytes
// requested, in use, cached and free), a default stream plus any streams and
// events the caller makes, CUDA graphs captured in thread-local mode and
// replayable only by the worker that captured them, cuBLASLt matrix
// products (Gemm) and NCCL communicators (NewComms, Device.JoinComm).
//
// Each device counts the host<->device copies (Upload, Download: calls and
// bytes) and the host waits (Device.Synchronize, Stream.Synchronize,
// Event.Synchronize, and the wait inside each Upload and Download, so also
// Device.Time's one per repetition) it issues, in atomic counters.
// Device.Counters returns a snapshot, from any goroutine; Since gives the
// counts of a region, so a test can assert that a training step made none:
//
//	before := d.Counters()
//	step()
//	if c := d.Counters().Since(before); !c.IsZero() { t.Errorf("step made %v", c) }
//
// Only calls through this package are counted: a caller that reaches package
// cuda directly bypasses them.
//
// *Device implements jit.Loader, so kernels from the kernel cache load per
// device with img.Function(d, name).
package gpu
