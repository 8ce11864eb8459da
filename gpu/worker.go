package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"dflash/cuda"
)

// ErrClosed is returned for work submitted to a closed worker.
var ErrClosed = errors.New("gpu: worker is closed")

// Worker owns one GPU: a goroutine locked to an OS thread with the GPU's
// primary context current. Its methods may be called from any goroutine.
type Worker struct {
	ordinal int
	info    Info
	tid     int
	gen     uint64 // open generation, part of the device's loader id

	mu       sync.RWMutex // guards closed against concurrent Submit
	closed   bool
	jobs     chan *Job
	exited   chan struct{}
	closeErr error
	dev      *Device
}

// Job is work queued on a worker by Submit.
type Job struct {
	fn       func(*Device) error
	done     chan struct{}
	err      error
	panicked any
	stack    []byte
}

// Wait blocks until the job has run and returns its error. If the job
// panicked, Wait panics with the job's panic value and stack.
func (j *Job) Wait() error {
	<-j.done
	if j.panicked != nil {
		panic(fmt.Sprintf("gpu job panicked: %v\n\njob stack:\n%s", j.panicked, j.stack))
	}
	return j.err
}

// Done is closed when the job has run.
func (j *Job) Done() <-chan struct{} { return j.done }

var registry = struct {
	sync.Mutex
	workers map[int]*Worker
	gen     uint64
}{workers: map[int]*Worker{}}

// Count returns the number of CUDA GPUs, or an error naming what is missing
// (driver library, device).
func Count() (int, error) { return cuda.DeviceCount() }

// Open returns the worker of GPU ordinal, starting it on first use. There is
// at most one worker per GPU in the process.
func Open(ordinal int) (*Worker, error) {
	registry.Lock()
	defer registry.Unlock()
	if w := registry.workers[ordinal]; w != nil {
		return w, nil
	}
	n, err := Count()
	if err != nil {
		return nil, fmt.Errorf("gpu %d: %w", ordinal, err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("gpu %d: no such GPU (%d present)", ordinal, n)
	}
	registry.gen++
	w, err := startWorker(ordinal, registry.gen, openCUDADevice)
	if err != nil {
		return nil, err
	}
	registry.workers[ordinal] = w
	return w, nil
}

// Workers opens the worker of every GPU, in ordinal order.
func Workers() ([]*Worker, error) {
	n, err := Count()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("gpu: no CUDA GPU present")
	}
	ws := make([]*Worker, n)
	for i := range ws {
		if ws[i], err = Open(i); err != nil {
			return nil, err
		}
	}
	return ws, nil
}

// CloseAll closes every open worker.
func CloseAll() error {
	registry.Lock()
	ws := make([]*Worker, 0, len(registry.workers))
	for _, w := range registry.workers {
		ws = append(ws, w)
	}
	registry.Unlock()
	var errs []error
	for _, w := range ws {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}

// setupFunc makes the worker's device on the worker thread.
type setupFunc func(w *Worker) (*Device, error)

// startWorker starts the worker goroutine and waits for its device.
func startWorker(ordinal int, gen uint64, setup setupFunc) (*Worker, error) {
	w := &Worker{ordinal: ordinal, gen: gen, jobs: make(chan *Job, 64), exited: make(chan struct{})}
	ready := make(chan error)
	go w.loop(setup, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Worker) loop(setup setupFunc, ready chan<- error) {
	// The thread stays locked until the goroutine exits, which ends the
	// thread: no other goroutine ever runs on a thread with this context.
	runtime.LockOSThread()
	defer close(w.exited)
	w.tid = gettid()
	workerThreads.Store(w.tid, w)
	defer workerThreads.Delete(w.tid)
	d, err := setup(w)
	if err != nil {
		ready <- fmt.Errorf("gpu %d: %w", w.ordinal, err)
		return
	}
	w.dev, w.info = d, d.info
	ready <- nil
	for j := range w.jobs {
		w.run(j)
	}
	w.closeErr = d.close()
}

func (w *Worker) run(j *Job) {
	defer close(j.done)
	defer func() {
		if r := recover(); r != nil {
			j.panicked, j.stack = r, debug.Stack()
		}
	}()
	j.err = j.fn(w.dev)
}

// Ordinal returns the GPU's ordinal.
func (w *Worker) Ordinal() int { return w.ordinal }

// Info returns the GPU's fixed properties.
func (w *Worker) Info() Info { return w.info }

// Thread returns the OS thread id of the worker (0 where not available).
func (w *Worker) Thread() int { return w.tid }

// Run runs fn on the worker and returns its error. Called from the worker's
// own thread (inside another Run or job), it calls fn directly.
func (w *Worker) Run(fn func(*Device) error) error {
	if w.tid != 0 && gettid() == w.tid {
		return fn(w.dev)
	}
	return w.Submit(fn).Wait()
}

// Submit queues fn on the worker and returns at once; Wait on the job for
// its result. Jobs run one at a time in submission order.
func (w *Worker) Submit(fn func(*Device) error) *Job {
	j := &Job{fn: fn, done: make(chan struct{})}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		j.err = ErrClosed
		close(j.done)
		return j
	}
	w.jobs <- j
	return j
}

// Close runs the jobs already queued, frees the device's resources on the
// worker thread, releases the primary context and ends the thread. It must
// not be called from the worker itself.
func (w *Worker) Close() error {
	if w.tid != 0 && gettid() == w.tid {
		panic("gpu: Worker.Close called from its own worker thread")
	}
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.jobs)
	}
	w.mu.Unlock()
	<-w.exited
	registry.Lock()
	if registry.workers[w.ordinal] == w {
		delete(registry.workers, w.ordinal)
	}
	registry.Unlock()
	return w.closeErr
}
