package cuda_test

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"dflash/cuda"
	"dflash/internal/testseed"
	"dflash/kernels"
)

// bindDevice0 locks the test goroutine to its thread and binds GPU 0's
// primary context, or skips naming what is missing. The thread is never
// unlocked, so it ends with the test and no other goroutine inherits the
// bound context.
func bindDevice0(t *testing.T) cuda.Device {
	t.Helper()
	if err := cuda.Init(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	n, err := cuda.DeviceCount()
	if err != nil || n == 0 {
		t.Skipf("no CUDA device (count %d, err %v)", n, err)
	}
	runtime.LockOSThread()
	dev, err := cuda.DeviceGet(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := cuda.PrimaryCtxRetain(dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := cuda.CtxSetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cuda.PrimaryCtxRelease(dev); err != nil {
			t.Error(err)
		}
	})
	return dev
}

func needNVRTC(t *testing.T) {
	t.Helper()
	if _, _, err := cuda.NVRTCVersion(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
}

func arch(t *testing.T, dev cuda.Device) string {
	ma, mi, err := dev.ComputeCapability()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("sm_%d%d", ma, mi)
}

func f32bytes(x []float32) unsafe.Pointer { return unsafe.Pointer(&x[0]) }

func TestNVRTCCompileLoadLaunch(t *testing.T) {
	dev := bindDevice0(t)
	needNVRTC(t)
	rng := testseed.New(t)

	t0 := time.Now()
	out, err := cuda.Compile(kernels.Source("saxpy.cu"), "saxpy.cu", []string{"--gpu-architecture=" + arch(t, dev)})
	compileMS := float64(time.Since(t0).Microseconds()) / 1000
	if err != nil {
		t.Fatalf("compile: %v\n%s", err, out.Log)
	}
	if !out.CUBIN || string(out.Image[:4]) != "\x7fELF" {
		t.Fatalf("image is not CUBIN (CUBIN=%v, %d bytes)", out.CUBIN, len(out.Image))
	}
	mod, err := cuda.ModuleLoadData(out.Image)
	if err != nil {
		t.Fatal(err)
	}
	defer cuda.ModuleUnload(mod)
	fn, err := cuda.ModuleGetFunction(mod, "saxpy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cuda.ModuleGetFunction(mod, "no_such_kernel"); !errors.Is(err, cuda.ErrNotFound) ||
		!strings.Contains(err.Error(), "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND") {
		t.Errorf("missing kernel error = %v", err)
	}
	if _, _, err := cuda.ModuleGetGlobal(mod, "no_such_global"); !errors.Is(err, cuda.ErrNotFound) ||
		!strings.Contains(err.Error(), "cuModuleGetGlobal_v2: CUDA_ERROR_NOT_FOUND") {
		t.Errorf("missing global error = %v", err)
	}
	regs, err := cuda.FuncGetAttribute(fn, cuda.FuncNumRegs)
	if err != nil || regs <= 0 {
		t.Errorf("FuncNumRegs = %d, %v", regs, err)
	}

	const n = 100_003
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	a := float32(rng.Float64()*4 - 2)
	dx, err := cuda.MemAlloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer cuda.MemFree(dx)
	dy, err := cuda.MemAlloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer cuda.MemFree(dy)
	s, err := cuda.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer cuda.StreamDestroy(s)
	pinned, err := cuda.MemAllocHost(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer cuda.MemFreeHost(pinned)
	copy(unsafe.Slice((*float32)(unsafe.Pointer(&pinned[0])), n), x)
	if err := cuda.MemcpyHtoDAsync(dx, unsafe.Pointer(&pinned[0]), 4*n, s); err != nil {
		t.Fatal(err)
	}
	if err := cuda.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	if err := cuda.MemcpyHtoD(dy, f32bytes(y), 4*n); err != nil {
		t.Fatal(err)
	}
	start, _ := cuda.EventCreate(cuda.EventDefault)
	end, _ := cuda.EventCreate(cuda.EventDefault)
	defer cuda.EventDestroy(start)
	defer cuda.EventDestroy(end)
	args := cuda.NewArgs().F32(a).Ptr(dx).Ptr(dy).I32(n)
	if err := cuda.EventRecord(start, s); err != nil {
		t.Fatal(err)
	}
	if err := cuda.LaunchKernel(fn, cuda.Dim((n+255)/256, 1, 1), cuda.Dim(256, 1, 1), 0, s, args); err != nil {
		t.Fatal(err)
	}
	if err := cuda.EventRecord(end, s); err != nil {
		t.Fatal(err)
	}
	if err := cuda.EventSynchronize(end); err != nil {
		t.Fatal(err)
	}
	ms, err := cuda.EventElapsedTime(start, end)
	if err != nil || ms <= 0 {
		t.Errorf("elapsed = %v ms, %v", ms, err)
	}
	got := make([]float32, n)
	if err := cuda.MemcpyDtoH(f32bytes(got), dy, 4*n); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i := range got {
		want := float64(a)*float64(x[i]) + float64(y[i])
		if math.Abs(float64(got[i])-want) > 1e-6*(1+math.Abs(want)) {
			if bad < 5 {
				t.Errorf("y[%d] = %v, want %v", i, got[i], want)
			}
			bad++
		}
	}
	report(t, "NVRTC compile + load + launch (saxpy, n=100003)", bad == 0 && !t.Failed(),
		"CUBIN "+strconv.Itoa(len(out.Image))+" B, "+strconv.Itoa(regs)+" regs",
		map[string]float64{"compile_ms": compileMS, "kernel_ms": float64(ms), "mismatches": float64(bad)})
}

// TestUnboundThreadGetsInvalidContext checks the failure the worker design
// exists to prevent, and that the error names the call and CUDA's error.
func TestUnboundThreadGetsInvalidContext(t *testing.T) {
	if err := cuda.Init(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	if n, _ := cuda.DeviceCount(); n == 0 {
		t.Skip("no CUDA device")
	}
	errc := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if err := cuda.CtxSetCurrent(0); err != nil {
			errc <- err
			return
		}
		_, err := cuda.MemAlloc(1 << 20)
		errc <- err
	}()
	err := <-errc
	ok := errors.Is(err, cuda.ErrInvalidContext) && strings.HasPrefix(err.Error(), "cuMemAlloc_v2: CUDA_ERROR_INVALID_CONTEXT")
	if !ok {
		t.Errorf("MemAlloc on an unbound thread: err = %v, want cuMemAlloc_v2: CUDA_ERROR_INVALID_CONTEXT", err)
	}
	detail := "<nil>"
	if err != nil {
		detail = err.Error()
	}
	report(t, "unbound thread -> CUDA_ERROR_INVALID_CONTEXT named in error", ok, detail, nil)
}

func TestCompileErrorLog(t *testing.T) {
	needNVRTC(t)
	src := "extern \"C\" __global__ void k(float* x) {\n  x[0] = undefined_name;\n}\n"
	out, err := cuda.Compile(src, "broken.cu", []string{"--gpu-architecture=compute_90"})
	if !errors.Is(err, cuda.ErrNVRTCCompile) {
		t.Fatalf("err = %v, want NVRTC_ERROR_COMPILATION", err)
	}
	if !strings.Contains(out.Log, "broken.cu(2)") || !strings.Contains(out.Log, "undefined_name") {
		t.Errorf("log lacks the error location:\n%s", out.Log)
	}
}

// TestMaxDynamicSharedMemory opts a kernel in to more than the default 48 KiB
// of dynamic shared memory and checks that the launch needs the opt-in.
func TestMaxDynamicSharedMemory(t *testing.T) {
	dev := bindDevice0(t)
	needNVRTC(t)
	optin, err := dev.Attribute(cuda.AttrMaxSharedMemoryPerBlockOptin)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cuda.Compile(kernels.Source("saxpy.cu"), "saxpy.cu", []string{"--gpu-architecture=" + arch(t, dev)})
	if err != nil {
		t.Fatal(err)
	}
	mod, err := cuda.ModuleLoadData(out.Image)
	if err != nil {
		t.Fatal(err)
	}
	defer cuda.ModuleUnload(mod)
	fn, err := cuda.ModuleGetFunction(mod, "saxpy")
	if err != nil {
		t.Fatal(err)
	}
	args := cuda.NewArgs().F32(1).Ptr(0).Ptr(0).I32(0)
	big := uint32(optin)
	before := cuda.LaunchKernel(fn, cuda.Dim(1, 1, 1), cuda.Dim(32, 1, 1), big, 0, args)
	if err := cuda.FuncSetAttribute(fn, cuda.FuncMaxDynamicSharedSize, optin); err != nil {
		t.Fatal(err)
	}
	got, err := cuda.FuncGetAttribute(fn, cuda.FuncMaxDynamicSharedSize)
	if err != nil {
		t.Fatal(err)
	}
	after := cuda.LaunchKernel(fn, cuda.Dim(1, 1, 1), cuda.Dim(32, 1, 1), big, 0, args)
	if after == nil {
		after = cuda.CtxSynchronize()
	}
	ok := before != nil && got == optin && after == nil
	if !ok {
		t.Errorf("launch with %d B before opt-in: %v; attribute after set: %d; launch after: %v", big, before, got, after)
	}
	report(t, "max dynamic shared memory opt-in (cuFuncSetAttribute)", ok,
		fmt.Sprintf("%d KiB: refused before opt-in (%v), accepted after", optin/1024, before), map[string]float64{"optin_bytes": float64(optin)})
}
