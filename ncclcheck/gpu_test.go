package ncclcheck

import (
	"context"
	"fmt"
	"os"
	"testing"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/jit"
)

func TestMain(m *testing.M) {
	// This binary loads NCCL on the GPU machines: multicast stays off.
	if _, err := cuda.GuardMulticast(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	gputest.Main(m)
}

// workersOrSkip opens every GPU, or skips naming what is missing.
func workersOrSkip(t *testing.T) []*gpu.Worker {
	t.Helper()
	ws, err := gpu.Workers()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	if _, err := cuda.NCCLVersion(); err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	return ws
}

// TestGPUAllReduce runs the check on every GPU of the machine, one rank per
// GPU in this process, and compares each result with the host's digest.
func TestGPUAllReduce(t *testing.T) {
	ws := workersOrSkip(t)
	if err := cuda.CheckCEnv(); err != nil {
		t.Fatal(err)
	}
	comms, err := gpu.NewComms(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for i, c := range comms {
			if err := ws[i].Run(func(*gpu.Device) error { return c.Destroy() }); err != nil {
				t.Error(err)
			}
		}
	}()
	plan := Plan{Sizes: []int64{4 << 10, 1 << 20, 9<<20 + 4}, DTypes: []dtype.DType{dtype.BF16, dtype.F32}, Iters: 5}
	res, err := RunWorkers(context.Background(), ws, comms, plan)
	if err != nil {
		t.Fatal(err)
	}
	rows := Merge(res)
	for _, f := range Failures(rows) {
		t.Error(f)
	}
	for _, r := range rows {
		dt := dtype.BF16
		if r.DType == "f32" {
			dt = dtype.F32
		}
		if want := ExpectedDigest(dt, r.Bytes, len(ws)); r.SHA256 != want {
			t.Errorf("%s %s: digest %s, host %s", r.DType, FormatBytes(r.Bytes), r.SHA256[:12], want[:12])
		}
		t.Logf("%d ranks %s %8s: %.1f us, busbw %.1f GB/s", len(ws), r.DType, FormatBytes(r.Bytes), r.TimeUS, r.BusBW)
	}
}

func TestGPUKernelCache(t *testing.T) {
	ws, err := gpu.Workers()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	if _, err := jit.NewNVRTC(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	res, err := KernelCacheWorkers(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pass {
		t.Error(res.Detail)
	}
	t.Log(res.Detail)
}
