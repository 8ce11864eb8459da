// Package gputest holds what the GPU tests of several packages share:
// the test binary's main (foreign-thread check on, every worker closed at
// the end), opening GPU 0 or an NVRTC cache (or the binary's shared one) or skipping with a message that
// names what is missing, running a function on a fresh backend,
// NaN-poisoned allocations, and moving float64 values
// to and from the device in a storage type (bf16, fp16 or fp32).
//
// GPU tests run on the GPU machine as compiled test binaries; elsewhere they
// skip. The functions that take no testing.TB return errors, so that they
// can run inside a worker's function, where t.Fatal must not be called.
package gputest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/jit"
)

// Main runs the tests of m with the foreign-thread check on (every CUDA
// call must come from its worker's thread), closes every worker, and exits;
// a package's TestMain calls it.
func Main(m *testing.M) {
	gpu.SetDebug(true)
	code := m.Run()
	if err := gpu.CloseAll(); err != nil {
		fmt.Fprintln(os.Stderr, "CloseAll:", err)
		code = 1
	}
	os.Exit(code)
}

// Worker0 opens GPU 0, or skips the test when there is none.
func Worker0(t testing.TB) *gpu.Worker {
	t.Helper()
	w, err := gpu.Open(0)
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	return w
}

// ErrNoNVRTC is the error of NewNVRTCCache when NVRTC cannot be loaded.
var ErrNoNVRTC = errors.New("no NVRTC")

// NewNVRTCCache returns a fresh NVRTC-backed kernel cache on dir ("" keeps
// it in memory only).
func NewNVRTCCache(dir string) (*jit.Cache, error) {
	n, err := jit.NewNVRTC()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoNVRTC, err)
	}
	return jit.New(jit.Config{Compiler: n, Dir: dir, Budget: 64})
}

// sharedCache is one memory-only NVRTC cache for the test binary, so that
// each kernel compiles once in a run.
var sharedCache = sync.OnceValues(func() (*jit.Cache, error) { return NewNVRTCCache("") })

// Worker0Cache opens GPU 0 and the test binary's one memory-only NVRTC
// cache, or skips the test when either is missing.
func Worker0Cache(t testing.TB) (*gpu.Worker, *jit.Cache) {
	t.Helper()
	w := Worker0(t)
	c, err := sharedCache()
	if err != nil {
		t.Skip(err)
	}
	return w, c
}

// OnBackend runs f on GPU 0's worker with a backend that open makes on the
// test binary's shared NVRTC cache (tensorcuda.NewBackend), and closes it
// after f; it skips the test when the GPU or NVRTC is missing and fails it
// with f's error.
func OnBackend[B interface{ Close() }](t testing.TB, open func(*jit.Cache, *gpu.Device) (B, error), f func(*gpu.Device, B) error) {
	t.Helper()
	w, cache := Worker0Cache(t)
	if err := RunBackend(w, cache, open, f); err != nil {
		t.Fatal(err)
	}
}

// RunBackend runs f on w with a backend that open makes on cache, closes
// it after f, and returns open's or f's error: OnBackend for a test that
// needs a cache of its own.
func RunBackend[B interface{ Close() }](w *gpu.Worker, cache *jit.Cache, open func(*jit.Cache, *gpu.Device) (B, error), f func(*gpu.Device, B) error) error {
	return w.Run(func(d *gpu.Device) error {
		b, err := open(cache, d)
		if err != nil {
			return err
		}
		defer b.Close()
		return f(d, b)
	})
}

// NVRTCCache is NewNVRTCCache, skipping the test when NVRTC is missing.
func NVRTCCache(t testing.TB, dir string) *jit.Cache {
	t.Helper()
	c, err := NewNVRTCCache(dir)
	if errors.Is(err, ErrNoNVRTC) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Poison is the byte that Alloc fills memory with: 0xff makes NaN in bf16,
// fp16 and fp32, so an element a kernel fails to write shows as NaN.
const Poison = 0xff

// Alloc allocates n bytes (at least 1) on d filled with Poison.
func Alloc(d *gpu.Device, n int64) (gpu.Buffer, error) {
	b, err := d.Alloc(max(n, 1))
	if err != nil {
		return gpu.Buffer{}, err
	}
	if err := d.Memset(b, Poison, nil); err != nil {
		d.Free(b)
		return gpu.Buffer{}, err
	}
	return b, nil
}

// Upload stores x in storage type dt (BF16, F16 or F32) in a new buffer on
// d and returns it with the values the device holds: x rounded to dt.
func Upload(d *gpu.Device, dt dtype.DType, x []float64) (gpu.Buffer, []float64, error) {
	f := dtype.Convert[float32](x)
	b, err := Alloc(d, int64(len(x))*int64(dt.Size()))
	if err != nil {
		return gpu.Buffer{}, nil, err
	}
	if dt == dtype.F32 {
		err = gpu.Upload(d, b, f)
	} else {
		h := make([]uint16, len(x))
		dtype.EncodeHalves(dt, h, f)
		dtype.DecodeHalves(dt, f, h)
		err = gpu.Upload(d, b, h)
	}
	if err != nil {
		d.Free(b)
		return gpu.Buffer{}, nil, err
	}
	return b, dtype.Convert[float64](f), nil
}

// Download reads n elements of storage type dt (BF16, F16 or F32) from b.
func Download(d *gpu.Device, dt dtype.DType, b gpu.Buffer, n int) ([]float64, error) {
	f := make([]float32, n)
	if dt == dtype.F32 {
		if err := gpu.Download(d, f, b); err != nil {
			return nil, err
		}
	} else {
		h := make([]uint16, n)
		if err := gpu.Download(d, h, b); err != nil {
			return nil, err
		}
		dtype.DecodeHalves(dt, f, h)
	}
	return dtype.Convert[float64](f), nil
}
