package gpu_test

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
	"dflash/jit"
	"dflash/kernels"
)

func grid1(n, block int) (cuda.Dim3, cuda.Dim3) {
	return cuda.Dim(uint32((n+block-1)/block), 1, 1), cuda.Dim(uint32(block), 1, 1)
}

// TestEightGoroutinesOneCompile: eight goroutines ask the cache for the same
// kernel at once and launch it through the worker; NVRTC runs once and the
// module loads once.
func TestEightGoroutinesOneCompile(t *testing.T) {
	w := gputest.Worker0(t)
	c := gputest.NVRTCCache(t, t.TempDir())
	src := jit.Source{Family: "saxpy", Code: kernels.Source("saxpy.cu"), Arch: w.Info().Arch()}
	seed := testseed.Seed(t)
	const n = 1 << 16
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			img, err := c.Get(context.Background(), src)
			if err != nil {
				errs[g] = err
				return
			}
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			x, y := make([]float32, n), make([]float32, n)
			for i := range x {
				x[i], y[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			a := float32(g) + 0.5
			var got []float32
			errs[g] = w.Submit(func(d *gpu.Device) error {
				fn, err := img.Function(d, "saxpy")
				if err == nil {
					got, err = gpu.Saxpy(d, fn, a, x, y)
				}
				return err
			}).Wait()
			for i := 0; i < n && errs[g] == nil; i++ {
				want := float64(a)*float64(x[i]) + float64(y[i])
				if math.Abs(float64(got[i])-want) > 1e-5*(1+math.Abs(want)) {
					errs[g] = fmt.Errorf("goroutine %d: y[%d] = %v, want %v", g, i, got[i], want)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	st := c.Stats()
	ok := !t.Failed() && st.Compiles == 1 && st.MemoryHits == 7 && st.ModuleLoads == 1 && st.FunctionHits == 7
	if !ok {
		t.Errorf("stats %+v: want 1 compile, 7 memory hits, 1 module load, 7 function hits", st)
	}
	report(t, "8 goroutines launch one kernel through the worker -> 1 compile", ok,
		fmt.Sprintf("compiles %d, memory hits %d (%d waited), module loads %d, function hits %d",
			st.Compiles, st.MemoryHits, st.Waits, st.ModuleLoads, st.FunctionHits),
		map[string]float64{"compiles": float64(st.Compiles), "compile_ms": float64(st.CompileTime.Microseconds()) / 1000})
}

// elementwiseSource holds the graph test's three small in-place kernels;
// it builds alone with nvcc (scripts/gpu-check.sh).
//
//go:embed testdata/elementwise.cu
var elementwiseSource string

// elementwiseImage returns GPU 0's worker and elementwiseSource compiled
// for it (the test skips without a GPU).
func elementwiseImage(t *testing.T) (*gpu.Worker, *jit.Image) {
	w := gputest.Worker0(t)
	c := gputest.NVRTCCache(t, "")
	img, err := c.Get(context.Background(), jit.Source{Family: "elementwise", Code: elementwiseSource, Arch: w.Info().Arch()})
	if err != nil {
		t.Fatal(err)
	}
	return w, img
}

// elementwiseSetup loads the three kernels of elementwiseSource from img on
// d and allocates count buffers of n float32s; free releases them.
func elementwiseSetup(d *gpu.Device, img *jit.Image, count, n int) (map[string]cuda.Function, []gpu.Buffer, func(), error) {
	fns := map[string]cuda.Function{}
	var bufs []gpu.Buffer
	free := func() {
		for _, b := range bufs {
			d.Free(b)
		}
	}
	for _, name := range []string{"ew_affine", "ew_square", "ew_accumulate"} {
		f, err := img.Function(d, name)
		if err != nil {
			return nil, nil, free, err
		}
		fns[name] = f
	}
	for range count {
		b, err := d.Alloc(int64(4 * n))
		if err != nil {
			return nil, nil, free, err
		}
		bufs = append(bufs, b)
	}
	return fns, bufs, free, nil
}

// TestGraphReplayMatchesLaunches captures three dependent kernels into a
// graph and checks that replaying it gives bit-identical results to plain
// launches, and both match a float64 CPU reference; Device.Launches counts
// each plain kernel once, nothing while capturing, and a graph launch once.
func TestGraphReplayMatchesLaunches(t *testing.T) {
	w, img := elementwiseImage(t)
	rng := testseed.New(t)
	const n, reps = 50_000, 5
	const a, b = float32(0.5), float32(0.1)
	x0, y0 := make([]float32, n), make([]float32, n)
	for i := range x0 {
		x0[i], y0[i] = float32(rng.Float64()*2-1), float32(rng.Float64()*2-1)
	}
	var plainX, plainY, graphX, graphY []float32
	var foreignErr error
	var plainLaunches, captureLaunches, graphLaunches int64 // Device.Launches
	err := w.Run(func(d *gpu.Device) error {
		fns, bufs, free, err := elementwiseSetup(d, img, 4, n)
		if err != nil {
			return err
		}
		defer free()
		// one argument list per launch: captured parameters are copied at capture time
		step := func(s *gpu.Stream, x, y gpu.Buffer) error {
			gr, bl := grid1(n, 128)
			if err := d.Launch(fns["ew_affine"], gr, bl, 0, s, cuda.NewArgs().Ptr(x.Ptr).F32(a).F32(b).I32(n)); err != nil {
				return err
			}
			if err := d.Launch(fns["ew_square"], gr, bl, 0, s, cuda.NewArgs().Ptr(x.Ptr).I32(n)); err != nil {
				return err
			}
			return d.Launch(fns["ew_accumulate"], gr, bl, 0, s, cuda.NewArgs().Ptr(y.Ptr).Ptr(x.Ptr).I32(n))
		}
		for i, v := range [][]float32{x0, y0, x0, y0} {
			if err := gpu.Upload(d, bufs[i], v); err != nil {
				return err
			}
		}
		launches := d.Launches()
		for r := 0; r < reps; r++ {
			if err := step(nil, bufs[0], bufs[1]); err != nil {
				return err
			}
		}
		plainLaunches = d.Launches() - launches
		g, err := d.Capture(nil, func(s *gpu.Stream) error { return step(s, bufs[2], bufs[3]) })
		if err != nil {
			return err
		}
		captureLaunches = d.Launches() - launches - plainLaunches
		for r := 0; r < reps; r++ {
			if err := g.Launch(nil); err != nil {
				return err
			}
		}
		done := make(chan error)
		go func() { done <- g.Launch(nil) }() // not the capturing worker
		foreignErr = <-done
		graphLaunches = d.Launches() - launches - plainLaunches - captureLaunches
		plainX, plainY, graphX, graphY = make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for i, dst := range [][]float32{plainX, plainY, graphX, graphY} {
			if err := gpu.Download(d, dst, bufs[i]); err != nil {
				return err
			}
		}
		return g.Destroy()
	})
	if err != nil {
		t.Fatal(err)
	}
	identical, maxRel := true, 0.0
	for i := 0; i < n; i++ {
		if plainX[i] != graphX[i] || plainY[i] != graphY[i] {
			identical = false
		}
		x, y := float64(x0[i]), float64(y0[i])
		for r := 0; r < reps; r++ {
			x = float64(a)*x + float64(b)
			x *= x
			y += x
		}
		maxRel = math.Max(maxRel, math.Abs(float64(graphY[i])-y)/(1+math.Abs(y)))
	}
	ownerOK := errors.Is(foreignErr, gpu.ErrNotOwner)
	// 3 kernels a plain step, none counted while captured, one a graph
	// launch, none for the launch refused on a foreign thread
	if plainLaunches != 3*reps || captureLaunches != 0 || graphLaunches != reps {
		t.Errorf("Launches counted %d plain steps' kernels, %d captured, %d graph launches; want %d, 0, %d",
			plainLaunches, captureLaunches, graphLaunches, 3*reps, reps)
	}
	if !identical || maxRel > 1e-5 || !ownerOK {
		t.Errorf("identical %v, max relative error %.2e, foreign launch error %v", identical, maxRel, foreignErr)
	}
	report(t, "graph capture (thread-local) + replay == plain launches", identical && maxRel <= 1e-5 && ownerOK,
		fmt.Sprintf("3 kernels x %d replays, bit-identical %v, vs float64 max |err|/(1+|ref|) %.1e; replay from another thread: %v", reps, identical, maxRel, foreignErr),
		map[string]float64{"max_rel_err": maxRel})
}

// TestAllocatorReuseOnGPU repeats a "training step" of allocations and
// checks that only the first step reaches the driver, then provokes an
// out-of-memory error and checks its numbers.
func TestAllocatorReuseOnGPU(t *testing.T) {
	w := gputest.Worker0(t)
	sizes := []int64{1 << 20, 3<<20 + 5, 100_000, 64 << 20, 512}
	var before, after gpu.AllocStats
	var oomErr error
	var released int64
	err := w.Run(func(d *gpu.Device) error {
		// Blocks earlier tests left in the cache would serve the first step.
		if _, err := d.ReleaseCached(); err != nil {
			return err
		}
		before = d.AllocStats()
		for step := 0; step < 4; step++ {
			var bufs []gpu.Buffer
			for _, n := range sizes {
				b, err := d.Alloc(n)
				if err != nil {
					return err
				}
				if err := d.Memset(b, byte(step), nil); err != nil {
					return err
				}
				bufs = append(bufs, b)
			}
			for _, b := range bufs {
				d.Free(b)
			}
		}
		after = d.AllocStats()
		var err error
		if released, err = d.ReleaseCached(); err != nil {
			return err
		}
		_, oomErr = d.Alloc(4 << 40) // 4 TiB
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	devAllocs := after.DeviceAllocs - before.DeviceAllocs
	reuses := after.Reuses - before.Reuses
	var oom *gpu.OutOfMemoryError
	oomOK := errors.As(oomErr, &oom) && errors.Is(oomErr, cuda.ErrOutOfMemory) && oom.Total > 0 && oom.Requested == 4<<40 &&
		strings.Contains(oomErr.Error(), "free of")
	ok := devAllocs == int64(len(sizes)) && reuses == 3*int64(len(sizes)) && oomOK && released > 0
	if !ok {
		t.Errorf("device allocs %d, reuses %d, released %d, OOM error %v", devAllocs, reuses, released, oomErr)
	}
	report(t, "caching allocator reuse + OOM details", ok,
		fmt.Sprintf("4 steps x %d buffers: %d driver allocs, %d reuses; OOM: %v", len(sizes), devAllocs, reuses, oomErr),
		map[string]float64{"device_allocs": float64(devAllocs), "reuses": float64(reuses), "released_bytes": float64(released)})
}

// TestForeignThreadCaughtOnGPU: in debug mode, a CUDA call from a goroutine
// a job started, or from the test goroutine, fails before reaching the driver.
func TestForeignThreadCaughtOnGPU(t *testing.T) {
	w := gputest.Worker0(t)
	var inJob, direct error
	var before, after gpu.AllocStats
	err := w.Run(func(d *gpu.Device) error {
		before = d.AllocStats()
		done := make(chan error)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			_, err := d.Alloc(1 << 20)
			done <- err
		}()
		inJob = <-done
		after = d.AllocStats()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, direct = cuda.MemAlloc(1 << 20)
	ok := errors.Is(inJob, gpu.ErrForeignThread) && errors.Is(direct, gpu.ErrForeignThread) && after == before
	if !ok {
		t.Errorf("from a job's goroutine: %v; from the test goroutine: %v", inJob, direct)
	}
	report(t, "foreign-thread CUDA call caught (debug mode)", ok, fmt.Sprintf("%v | %v", inJob, direct), nil)
}

// TestNCCLSingleRank runs NCCL collectives on a one-rank communicator made
// both ways: ncclCommInitRank (unique id passed by value) and ncclCommInitAll.
func TestNCCLSingleRank(t *testing.T) {
	w := gputest.Worker0(t)
	ver, err := cuda.NCCLVersion()
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	comms, err := gpu.NewComms([]*gpu.Worker{w})
	if err != nil {
		t.Fatal(err)
	}
	rng := testseed.New(t)
	const n = 1 << 20
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	var detail []string
	err = w.Run(func(d *gpu.Device) error {
		send, err := d.Alloc(4 * n)
		if err != nil {
			return err
		}
		defer d.Free(send)
		recv, err := d.Alloc(4 * n)
		if err != nil {
			return err
		}
		defer d.Free(recv)
		if err := gpu.Upload(d, send, x); err != nil {
			return err
		}
		check := func(what string) error {
			got := make([]float32, n)
			if err := gpu.Download(d, got, recv); err != nil {
				return err
			}
			for i := range got {
				if got[i] != x[i] {
					return fmt.Errorf("%s: element %d = %v, want %v", what, i, got[i], x[i])
				}
			}
			detail = append(detail, what+" ok")
			return nil
		}
		c := comms[0]
		if c.Size() != 1 || c.Rank() != 0 {
			return fmt.Errorf("comm size %d rank %d", c.Size(), c.Rank())
		}
		if err := c.AllReduce(nil, send, recv, n, dtype.F32, cuda.NCCLSum); err != nil {
			return err
		}
		if err := check("InitRank all-reduce sum"); err != nil {
			return err
		}
		// two half-size all-reduces fused in one group
		if err := d.Memset(recv, 0, nil); err != nil {
			return err
		}
		half := gpu.Buffer{Ptr: send.Ptr + 2*n, Size: 2 * n}
		halfRecv := gpu.Buffer{Ptr: recv.Ptr + 2*n, Size: 2 * n}
		if err := d.NCCLGroup(func() error {
			if err := c.AllReduce(nil, send, recv, n/2, dtype.F32, cuda.NCCLSum); err != nil {
				return err
			}
			return c.AllReduce(nil, half, halfRecv, n/2, dtype.F32, cuda.NCCLSum)
		}); err != nil {
			return err
		}
		if err := check("grouped all-reduce (2 buckets)"); err != nil {
			return err
		}
		if err := d.Memset(recv, 0, nil); err != nil {
			return err
		}
		if err := c.Broadcast(nil, send, recv, n, dtype.F32, 0); err != nil {
			return err
		}
		if err := check("InitRank broadcast"); err != nil {
			return err
		}
		all, err := cuda.NCCLCommInitAll([]int{0})
		if err != nil {
			return err
		}
		if cnt, err := all[0].Count(); err != nil || cnt != 1 {
			return fmt.Errorf("InitAll count %d, %v", cnt, err)
		}
		if err := d.Memset(recv, 0, nil); err != nil {
			return err
		}
		if err := all[0].AllReduce(send.Ptr, recv.Ptr, n, cuda.NCCLFloat32, cuda.NCCLMax, d.Stream().Handle()); err != nil {
			return err
		}
		if err := check("InitAll all-reduce max"); err != nil {
			return err
		}
		return all[0].Destroy()
	})
	if err != nil {
		t.Fatal(err)
	}
	report(t, "NCCL single-rank all-reduce", true,
		fmt.Sprintf("NCCL %d.%d.%d: %s", ver/10000, ver%10000/100, ver%100, strings.Join(detail, ", ")), nil)
}
