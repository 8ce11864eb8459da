package flexbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"dflash/dtype"
	"dflash/flex"
	"dflash/flex/flexcuda"
	"dflash/gpu"
	"dflash/jit"
)

// runCUDA times flex attention on GPU 0 as o describes.
func runCUDA(o Options) (*Report, error) {
	r := newCaseRand(o.Seed)
	pc, err := o.problem(r)
	if err != nil {
		return nil, err
	}
	cache, err := jit.NewNVRTCCache(o.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	w, err := gpu.Open(0)
	if err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	defer gpu.CloseAll()
	d := pc.dims
	att, err := flexcuda.New(cache, pc.mask, nil, flexcuda.Config{HeadDim: d.HeadDim, Group: d.Group(), DType: o.DType, BlockQ: o.Block,
		Deterministic: o.Deterministic})
	if err != nil {
		return nil, err
	}
	var bld *flexcuda.Builder
	if pc.dflash {
		bld, err = flexcuda.NewDFlashBuilder(cache, o.BlockSize, o.Block, kvBlock)
	} else {
		bld, err = flexcuda.NewBuilder(cache, pc.mask, o.Block, kvBlock)
	}
	if err != nil {
		return nil, err
	}
	rep := pc.newReport(o)
	rep.GPU, rep.Spec, rep.Compile = w.Info().Name, att.Spec().Key(), &Compile{CacheDir: o.CacheDir}

	// Compile (or load from disk) the three modules at once, then load them.
	start := time.Now()
	var wg sync.WaitGroup
	var errA, errB error
	wg.Add(2)
	go func() { defer wg.Done(); errA = att.Compile(context.Background(), w.Info().Arch(), !o.ForwardOnly) }()
	go func() { defer wg.Done(); errB = bld.Compile(context.Background(), w.Info().Arch()) }()
	wg.Wait()
	if err := errors.Join(errA, errB); err != nil {
		return nil, err
	}
	err = w.Run(func(dev *gpu.Device) error {
		ks, err := att.Prepare(context.Background(), dev, !o.ForwardOnly)
		if err != nil {
			return err
		}
		bs, err := bld.Prepare(context.Background(), dev)
		if err != nil {
			return err
		}
		rep.Compile.Kernels = append(ks, bs...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	rep.Compile.PrepareMS = msf(time.Since(start))
	st := cache.Stats()
	rep.Compile.Compiles = st.Compiles
	rep.Compile.FromDisk = st.Compiles == 0 && st.DiskHits > 0
	slog.Info("kernels ready", "spec", rep.Spec, "prepare_ms", rep.Compile.PrepareMS, "compiles", st.Compiles, "disk_hits", st.DiskHits)
	if o.CompileOnly {
		return rep, nil
	}

	cbm, err := flex.NewBlockMask(pc.mask, pc.args, d, o.Block, kvBlock)
	if err != nil {
		return nil, err
	}
	rep.BlockMask.CPUBuildMS = msf(cbm.Stats.Build)
	rep.BlockMask.Partial, rep.BlockMask.Full, rep.BlockMask.Empty = cbm.Stats.Partial, cbm.Stats.Full, cbm.Stats.Empty
	rep.BlockMask.Blocks, rep.BlockMask.IndexBytes = cbm.Stats.Partial+cbm.Stats.Full+cbm.Stats.Empty, cbm.Stats.Bytes
	rep.BlockDensity = cbm.Density()
	rep.BlockMask.Source = "gpu-generic"
	if pc.dflash {
		rep.BlockMask.Source = "gpu-dflash"
	}
	if o.CPUBlockMask {
		rep.BlockMask.Source = "cpu"
	}
	inputs := randomHalves(o.Seed, o.DType, d)
	err = w.Run(func(dev *gpu.Device) error {
		return timeAttention(dev, att, bld, pc, cbm, inputs, o, rep)
	})
	if err != nil {
		return nil, err
	}
	rep.finish()
	return rep, nil
}

// halfInputs are q, k, v and dout as bf16/f16 bits.
type halfInputs struct{ q, k, v, dout []uint16 }

// randomHalves draws standard normal inputs (as torch.randn) on all cores.
func randomHalves(seed uint64, dt dtype.DType, d flex.Dims) halfInputs {
	nq := d.Batch * d.HeadsQ * d.LenQ * d.HeadDim
	nk := d.Batch * d.HeadsKV * d.LenKV * d.HeadDim
	in := halfInputs{make([]uint16, nq), make([]uint16, nk), make([]uint16, nk), make([]uint16, nq)}
	var wg sync.WaitGroup
	const chunk = 1 << 20
	for ti, t := range [][]uint16{in.q, in.k, in.v, in.dout} {
		for off := 0; off < len(t); off += chunk {
			wg.Add(1)
			go func(part []uint16, s uint64) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, s))
				f := make([]float32, len(part))
				for i := range f {
					f[i] = float32(r.NormFloat64())
				}
				dtype.EncodeHalves(dt, part, f)
			}(t[off:min(off+chunk, len(t))], uint64(ti)<<40|uint64(off))
		}
	}
	wg.Wait()
	return in
}

func timeAttention(dev *gpu.Device, att *flexcuda.Attention, bld *flexcuda.Builder, pc *attnCase, cbm *flex.BlockMask,
	in halfInputs, o Options, rep *Report) error {
	d := pc.dims
	var bufs []gpu.Buffer
	defer func() {
		for _, b := range bufs {
			dev.Free(b)
		}
	}()
	alloc := func(n int) (gpu.Buffer, error) {
		b, err := dev.Alloc(int64(n))
		if err == nil {
			bufs = append(bufs, b)
		}
		return b, err
	}
	up := func(x []uint16) (gpu.Buffer, error) {
		b, err := alloc(2 * len(x))
		if err != nil {
			return b, err
		}
		return b, gpu.Upload(dev, b, x)
	}
	c := &flexcuda.Call{Dims: d}
	var err error
	for _, x := range []struct {
		dst *gpu.Buffer
		src []uint16
	}{{&c.Q, in.q}, {&c.K, in.k}, {&c.V, in.v}, {&c.DOut, in.dout}} {
		if *x.dst, err = up(x.src); err != nil {
			return err
		}
	}
	for _, x := range []struct {
		dst *gpu.Buffer
		n   int
	}{{&c.Out, 2 * len(in.q)}, {&c.DQ, 2 * len(in.q)}, {&c.DK, 2 * len(in.k)}, {&c.DV, 2 * len(in.k)}, {&c.LSE, 4 * d.Batch * d.HeadsQ * d.LenQ}} {
		if *x.dst, err = alloc(x.n); err != nil {
			return err
		}
	}
	dargs, err := flexcuda.UploadArgs(dev, pc.args)
	if err != nil {
		return err
	}
	defer dargs.Free(dev)
	c.Args = dargs
	defer att.Release(dev)
	defer bld.Release(dev)

	// median returns the median of reps timed runs of f after warm-ups, in ms.
	median := func(reps int, f func() error) (float64, error) {
		tm, err := dev.Time(o.Warmup, reps, f)
		if err != nil {
			return 0, err
		}
		return msf(tm.Median()), nil
	}

	// The block mask: built on the GPU (timed), checked against the CPU's.
	var gbm *flexcuda.BlockMask
	rep.BlockMask.GPUBuildMS, err = median(o.BuildReps, func() error {
		gbm, err = bld.Build(dev, nil, d, dargs, gbm)
		return err
	})
	if err != nil {
		return err
	}
	defer gbm.Free(dev)
	lists, err := gbm.Download(dev)
	if err != nil {
		return err
	}
	if diff := lists.Compare(gbm, cbm); diff != "" {
		slog.Error("GPU-built block mask differs from the CPU's", "diff", diff)
	} else {
		rep.BlockMask.ListsMatch = true
	}
	c.Mask = gbm
	if o.CPUBlockMask {
		um, err := flexcuda.UploadBlockMask(dev, cbm, nil)
		if err != nil {
			return err
		}
		defer um.Free(dev)
		c.Mask = um
	}
	if rep.ForwardMS, err = median(o.Reps, func() error { return att.Forward(dev, c) }); err != nil {
		return err
	}
	slog.Info("forward", "ms", rep.ForwardMS)
	if o.ForwardOnly {
		rep.Reps[1] = 0
		return nil
	}
	rep.FwdBwdMS, err = median(o.RepsFB, func() error {
		if err := att.Forward(dev, c); err != nil {
			return err
		}
		return att.Backward(dev, c)
	})
	slog.Info("forward+backward", "ms", rep.FwdBwdMS)
	if err != nil || o.Save == "" {
		return err
	}
	return saveCall(dev, att, c, pc, in, o)
}

// saveCall runs one forward and backward on c and writes its inputs and
// results to o.Save.
func saveCall(dev *gpu.Device, att *flexcuda.Attention, c *flexcuda.Call, pc *attnCase, in halfInputs, o Options) error {
	if err := att.Forward(dev, c); err != nil {
		return err
	}
	if err := att.Backward(dev, c); err != nil {
		return err
	}
	d := pc.dims
	nq, nk := len(in.q), len(in.k)
	dump := &attnDump{dims: d, dtype: o.DType,
		halves: map[string][]uint16{"q": in.q, "k": in.k, "v": in.v, "dout": in.dout,
			"out": make([]uint16, nq), "dq": make([]uint16, nq), "dk": make([]uint16, nk), "dv": make([]uint16, nk)}}
	for name, b := range map[string]gpu.Buffer{"out": c.Out, "dq": c.DQ, "dk": c.DK, "dv": c.DV} {
		if err := gpu.Download(dev, dump.halves[name], b); err != nil {
			return err
		}
	}
	dump.meta, dump.floats, dump.shapes = o.dumpMeta(pc)
	lse := make([]float32, d.Batch*d.HeadsQ*d.LenQ)
	if err := gpu.Download(dev, lse, c.LSE); err != nil {
		return err
	}
	dump.floats["lse"], dump.shapes["lse"] = lse, []int{d.Batch, d.HeadsQ, d.LenQ}
	if err := dump.write(o.Save); err != nil {
		return err
	}
	slog.Info("saved the call", "file", o.Save)
	return nil
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
