package gpu

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"dflash/cuda"
)

// fakeWorker starts a worker whose device has no CUDA behind it.
func fakeWorker(t *testing.T, ordinal int) *Worker {
	t.Helper()
	w, err := startWorker(ordinal, 99, func(w *Worker) (*Device, error) {
		return &Device{w: w, fake: true, info: Info{Ordinal: ordinal, Name: "fake", Major: 9}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func TestWorkerRunsEverythingOnOneThread(t *testing.T) {
	w := fakeWorker(t, 0)
	if w.Thread() == 0 && runtime.GOOS == "linux" {
		t.Fatal("worker thread id unknown")
	}
	var threads sync.Map
	var order []int
	var mu sync.Mutex
	jobs := make([]*Job, 0, 200)
	for i := 0; i < 200; i++ {
		jobs = append(jobs, w.Submit(func(d *Device) error {
			threads.Store(gettid(), true)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return nil
		}))
	}
	for _, j := range jobs {
		if err := j.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	threads.Range(func(k, v any) bool { n++; return k.(int) == w.Thread() })
	if n != 1 {
		t.Errorf("jobs ran on %d threads", n)
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("job %d ran in position %d: submission order not kept", v, i)
		}
	}
}

func TestWorkerConcurrentSubmittersAndReentrantRun(t *testing.T) {
	w := fakeWorker(t, 1)
	var count atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				err := w.Run(func(d *Device) error {
					if gettid() != w.Thread() {
						return errors.New("job off the worker thread")
					}
					// Run from inside a job runs inline instead of deadlocking.
					return w.Run(func(*Device) error { count.Add(1); return nil })
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if count.Load() != 16*50 {
		t.Errorf("%d nested runs, want %d", count.Load(), 16*50)
	}
}

func TestWorkerJobErrorsAndPanics(t *testing.T) {
	w := fakeWorker(t, 2)
	want := errors.New("boom")
	if err := w.Run(func(*Device) error { return want }); err != want {
		t.Errorf("Run error = %v", err)
	}
	func() {
		defer func() {
			r := recover()
			if r == nil || !strings.Contains(r.(string), "gpu job panicked: kaput") {
				t.Errorf("recovered %v", r)
			}
		}()
		w.Run(func(*Device) error { panic("kaput") })
	}()
	// the worker survives a panicking job
	if err := w.Run(func(*Device) error { return nil }); err != nil {
		t.Errorf("after panic: %v", err)
	}
}

func TestWorkerClose(t *testing.T) {
	w := fakeWorker(t, 3)
	var ran atomic.Int64
	var jobs []*Job
	for i := 0; i < 20; i++ {
		jobs = append(jobs, w.Submit(func(*Device) error { ran.Add(1); return nil }))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		j.Wait()
	}
	if ran.Load() != 20 {
		t.Errorf("%d of 20 queued jobs ran before Close returned", ran.Load())
	}
	if err := w.Submit(func(*Device) error { return nil }).Wait(); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestForeignThreadCheck(t *testing.T) {
	w := fakeWorker(t, 4)
	defer SetDebug(Debug()) // the GPU tests of this binary run in debug mode
	SetDebug(true)
	err := w.Run(func(d *Device) error {
		if err := d.check("Alloc"); err != nil {
			return err // on the worker thread: must pass
		}
		if err := checkCUDAThread("cuMemAlloc_v2"); err != nil {
			return err
		}
		errc := make(chan [2]error)
		go func() {
			runtime.LockOSThread() // a thread that is surely not the worker's
			defer runtime.UnlockOSThread()
			errc <- [2]error{d.check("Alloc"), checkCUDAThread("cuMemAlloc_v2")}
		}()
		errs := <-errc
		for i, e := range errs {
			var fe *ForeignThreadError
			if !errors.As(e, &fe) || !errors.Is(e, ErrForeignThread) {
				t.Errorf("check %d from a foreign goroutine: %v", i, e)
				continue
			}
			if fe.Thread == w.Thread() {
				t.Errorf("foreign thread reported as the worker's")
			}
		}
		if msg := errs[0].Error(); !strings.Contains(msg, "gpu 4: Alloc called from OS thread") || !strings.Contains(msg, "Worker.Run") {
			t.Errorf("message: %s", msg)
		}
		if msg := errs[1].Error(); !strings.Contains(msg, "cuMemAlloc_v2 called from OS thread") {
			t.Errorf("message: %s", msg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The hook is installed in package cuda: a context-bound call from the
	// test goroutine fails before reaching the driver; context-free ones pass.
	if _, err := cuda.MemAlloc(1024); !errors.Is(err, ErrForeignThread) {
		t.Errorf("cuda.MemAlloc from a foreign thread: %v", err)
	}
	SetDebug(false)
	if _, err := cuda.MemAlloc(1024); errors.Is(err, ErrForeignThread) {
		t.Error("check still active after SetDebug(false)")
	}
}
