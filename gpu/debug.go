package gpu

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"dflash/cuda"
	"dflash/internal/switches"
)

var debugOn atomic.Bool

// init turns the check on when DFLASH_GPU_DEBUG is on; a value that is not
// a boolean panics, naming the variable.
func init() {
	if switches.GPUDebug.MustValue() {
		SetDebug(true)
	}
}

// SetDebug turns the foreign-thread check on or off for the whole process.
func SetDebug(on bool) {
	debugOn.Store(on)
	if on {
		cuda.SetThreadCheck(checkCUDAThread)
	} else {
		cuda.SetThreadCheck(nil)
	}
}

// Debug reports whether the foreign-thread check is on.
func Debug() bool { return debugOn.Load() }

// ErrForeignThread is matched (errors.Is) by every *ForeignThreadError.
var ErrForeignThread = errors.New("CUDA call from a thread that does not own the GPU")

// ForeignThreadError reports a CUDA call made off the worker thread that
// owns the GPU.
type ForeignThreadError struct {
	Call   string // CUDA function or Device method
	Thread int    // OS thread that made the call
	GPU    int    // ordinal of the GPU whose worker should have made it; -1 if unknown
	Owner  int    // that worker's OS thread; 0 if unknown
}

func (e *ForeignThreadError) Error() string {
	if e.GPU < 0 {
		return fmt.Sprintf("gpu: %s called from OS thread %d, which is no GPU worker thread (run GPU work in Worker.Run or Worker.Submit)", e.Call, e.Thread)
	}
	return fmt.Sprintf("gpu %d: %s called from OS thread %d, but GPU %d belongs to its worker on thread %d (run GPU work in Worker.Run or Worker.Submit)",
		e.GPU, e.Call, e.Thread, e.GPU, e.Owner)
}

// Unwrap lets errors.Is match ErrForeignThread.
func (e *ForeignThreadError) Unwrap() error { return ErrForeignThread }

// workerThreads maps the OS thread id of each running worker to it.
var workerThreads sync.Map // int -> *Worker

func checkCUDAThread(call string) error {
	tid := gettid()
	if tid == 0 {
		return nil // no thread ids on this platform
	}
	if _, ok := workerThreads.Load(tid); ok {
		return nil
	}
	return &ForeignThreadError{Call: call, Thread: tid, GPU: -1}
}
