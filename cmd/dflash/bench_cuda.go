package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"dflash/dtype"
	"dflash/flex"
	"dflash/flex/flexcuda"
	"dflash/gpu"
	"dflash/jit"
)

// The CUDA path of `dflash bench attention`: bench.go's benchAttention hands
// every `--device cuda` invocation to benchAttentionCUDA.

// isCUDABench reports whether bench attention's arguments ask for --device cuda.
func isCUDABench(args []string) bool {
	for i, a := range args {
		if a == "--device=cuda" || a == "-device=cuda" || ((a == "--device" || a == "-device") && i+1 < len(args) && args[i+1] == "cuda") {
			return true
		}
	}
	return false
}

// cudaBenchOptions are the flags of the CUDA attention benchmark: bench.go's
// shape flags with the same names and defaults, and the CUDA ones.
type cudaBenchOptions struct {
	Mask                                   string
	Batch, Heads, KVHeads, HeadDim         int
	Anchors, BlockSize, Context            int
	Seq, Window, DocLen, Block             int
	DType                                  dtype.DType // storage: bf16 or f16
	Reps, RepsFB, Warmup, BuildReps        int
	Seed                                   uint64
	CacheDir                               string
	CompileOnly, ForwardOnly, CPUBlockMask bool
	Deterministic                          bool   // the backward without atomics (flexcuda.Config.Deterministic)
	Save                                   string // write inputs and results here (safetensors) for bench/flex_peer.py --check
}

// cudaAttnReport is the result of one CUDA attention benchmark.
type cudaAttnReport struct {
	Device    string    `json:"device"`
	GPU       string    `json:"gpu"`
	Mask      string    `json:"mask"`
	DType     string    `json:"dtype"`
	Dims      flex.Dims `json:"dims"`
	Spec      string    `json:"spec"`
	Reps      [2]int    `json:"reps"` // forward, forward+backward
	ForwardMS float64   `json:"forward_ms"`
	FwdBwdMS  float64   `json:"forward_backward_ms"`
	// Useful TFLOP/s count allowed pairs only: 4·D flops per pair forward,
	// 14·D forward+backward.
	ForwardTFLOPS float64 `json:"forward_tflops"`
	FwdBwdTFLOPS  float64 `json:"forward_backward_tflops"`
	AllowedPairs  float64 `json:"allowed_pairs"` // over batch and query heads
	Density       float64 `json:"density"`
	BlockDensity  float64 `json:"block_density"`
	BlockMask     struct {
		Source     string  `json:"source"` // gpu-dflash, gpu-generic or cpu
		GPUBuildMS float64 `json:"gpu_build_ms"`
		CPUBuildMS float64 `json:"cpu_build_ms"`
		ListsMatch bool    `json:"lists_match"` // GPU lists equal flex.NewBlockMask's
		Partial    int     `json:"partial"`
		Full       int     `json:"full"`
		Empty      int     `json:"empty"`
	} `json:"block_mask"`
	Compile struct {
		CacheDir  string                `json:"cache_dir"`
		PrepareMS float64               `json:"prepare_ms"` // wall: compile or disk load, module load
		FromDisk  bool                  `json:"from_disk"`
		Compiles  int64                 `json:"compiles"`
		Kernels   []flexcuda.KernelInfo `json:"kernels"`
	} `json:"compile"`
}

// benchAttentionCUDA runs `dflash bench attention --device cuda` with args.
func benchAttentionCUDA(args []string) error {
	fs := newFlagSet("bench attention", "bench attention --device cuda --mask causal|dflash|document|window [--json] [flags]")
	var o cudaBenchOptions
	fs.String("device", "cuda", "device: cuda here (cpu is bench.go's path)")
	fs.StringVar(&o.Mask, "mask", "dflash", "mask: causal, dflash, document or window")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	dtypeArg := fs.String("dtype", "bf16", "storage type: bf16 or f16")
	fs.IntVar(&o.Batch, "batch", 1, "batch size")
	fs.IntVar(&o.Heads, "heads", 4, "query heads")
	fs.IntVar(&o.KVHeads, "kv-heads", 1, "key/value heads (divides --heads)")
	fs.IntVar(&o.HeadDim, "head-dim", 128, "head dimension: 64, 128 or 256")
	fs.IntVar(&o.Anchors, "anchors", 128, "dflash: draft blocks (anchors) per sequence")
	fs.IntVar(&o.BlockSize, "block-size", 16, "dflash: draft block size")
	fs.IntVar(&o.Context, "context", 768, "dflash: context length")
	fs.IntVar(&o.Seq, "seq", 2048, "causal, document, window: sequence length (queries = keys)")
	fs.IntVar(&o.Window, "window", 256, "window: sliding window size")
	fs.IntVar(&o.DocLen, "doc-len", 256, "document: document length (documents of equal length, packed)")
	fs.IntVar(&o.Block, "block", flex.DefaultBlock, "block-mask q block (kv block is 128)")
	fs.IntVar(&o.Reps, "reps", 30, "timed forward passes (the median is reported)")
	fs.IntVar(&o.RepsFB, "reps-fb", 20, "timed forward+backward passes")
	fs.IntVar(&o.Warmup, "warmup", 5, "untimed passes before timing")
	fs.IntVar(&o.BuildReps, "build-reps", 50, "timed GPU block-mask builds")
	fs.Uint64Var(&o.Seed, "seed", 1, "random seed for inputs, anchors")
	fs.StringVar(&o.CacheDir, "cache-dir", "", cacheDirUsage)
	fs.BoolVar(&o.CompileOnly, "compile-only", false, "only compile or load the kernels and report the time (cold or warm from disk)")
	fs.BoolVar(&o.ForwardOnly, "forward-only", false, "time the forward pass only")
	fs.BoolVar(&o.CPUBlockMask, "cpu-block-mask", false, "attend with the CPU-built block mask instead of the GPU-built one")
	fs.BoolVar(&o.Deterministic, "deterministic", false, "time the deterministic backward (no atomics: bit-identical dQ, dK, dV)")
	fs.StringVar(&o.Save, "save", "", "after timing, write one call's inputs and outputs to this safetensors `file` (bench/flex_peer.py --check compares them with PyTorch)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.DType, err = dtype.ParseOneOf(*dtypeArg, dtype.BF16, dtype.F16); err != nil {
		return fmt.Errorf("--dtype: %w on cuda", err)
	}
	if o.Save != "" && (o.ForwardOnly || o.CompileOnly) {
		return fmt.Errorf("--save writes a forward and backward call: not with --forward-only or --compile-only")
	}
	rep, err := runAttentionCUDA(o)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printCUDAReport(rep, o.CompileOnly)
	return nil
}

// cudaBenchCase is the problem a set of options describes.
type cudaBenchCase struct {
	dims    flex.Dims
	mask    *flex.MaskProgram
	args    *flex.Args
	pairs   float64 // allowed (q, kv) pairs summed over the batch, per head
	dflash  bool
	anchors []int32 // dflash: [batch, anchors]
	docIDs  []int32 // document: [batch, seq]
}

func (o cudaBenchOptions) problem(r *rand.Rand) (*cudaBenchCase, error) {
	for name, v := range map[string]int{"batch": o.Batch, "heads": o.Heads, "kv-heads": o.KVHeads, "head-dim": o.HeadDim,
		"anchors": o.Anchors, "block-size": o.BlockSize, "context": o.Context, "seq": o.Seq, "window": o.Window,
		"doc-len": o.DocLen, "block": o.Block, "reps": o.Reps, "reps-fb": o.RepsFB, "build-reps": o.BuildReps} {
		if v < 1 {
			return nil, fmt.Errorf("--%s %d: must be >= 1", name, v)
		}
	}
	if o.Heads%o.KVHeads != 0 {
		return nil, fmt.Errorf("--heads %d is not a multiple of --kv-heads %d", o.Heads, o.KVHeads)
	}
	sq := flex.Dims{Batch: o.Batch, HeadsQ: o.Heads, HeadsKV: o.KVHeads, LenQ: o.Seq, LenKV: o.Seq, HeadDim: o.HeadDim}
	c := &cudaBenchCase{dims: sq, args: flex.NewArgs()}
	S := float64(o.Seq)
	switch o.Mask {
	case "causal":
		c.mask, c.pairs = flex.Causal(), float64(o.Batch)*S*(S+1)/2
	case "window":
		c.mask = flex.SlidingWindow(o.Window)
		for i := 0; i < o.Seq; i++ {
			c.pairs += float64(min(i+1, o.Window))
		}
		c.pairs *= float64(o.Batch)
	case "document":
		c.mask = flex.Document(true)
		ids := make([]int32, o.Batch*o.Seq)
		for i := range ids {
			ids[i] = int32((i % o.Seq) / o.DocLen)
		}
		c.args.SetIntTensor(flex.DocIDs, ids, o.Batch, o.Seq)
		c.docIDs = ids
		for s := 0; s < o.Seq; s += o.DocLen {
			l := float64(min(o.DocLen, o.Seq-s))
			c.pairs += l * (l + 1) / 2
		}
		c.pairs *= float64(o.Batch)
	case "dflash":
		if o.Context < 2 || o.Anchors > o.Context-1 {
			return nil, fmt.Errorf("--anchors %d distinct anchors need --context > %d (have %d)", o.Anchors, o.Anchors, o.Context)
		}
		c.dims = flex.DFlashDims(o.Batch, o.Heads, o.KVHeads, o.Anchors, o.BlockSize, o.Context, o.HeadDim)
		c.mask, c.dflash = flex.DFlashMask(o.BlockSize), true
		// Distinct sorted anchors in [1, ctx), the same for every sequence
		// (as bench/flex_peer.py draws them).
		perm := r.Perm(o.Context - 1)[:o.Anchors]
		row := make([]int32, o.Anchors)
		for i, p := range perm {
			row[i] = int32(p + 1)
		}
		slices.Sort(row)
		an := make([]int32, 0, o.Batch*o.Anchors)
		for b := 0; b < o.Batch; b++ {
			an = append(an, row...)
		}
		c.args, c.anchors = flex.DFlashArgs(o.Context, an, o.Anchors, nil), an
		for _, a := range row { // a block sees the a context positions before it and itself
			c.pairs += float64(o.BlockSize) * float64(int(a)+o.BlockSize)
		}
		c.pairs *= float64(o.Batch)
	default:
		return nil, fmt.Errorf("--mask %q: unknown mask (causal, dflash, document or window)", o.Mask)
	}
	return c, nil
}

// runAttentionCUDA times flex attention on GPU 0 as o describes.
func runAttentionCUDA(o cudaBenchOptions) (*cudaAttnReport, error) {
	r := rand.New(rand.NewPCG(o.Seed, o.Seed+1))
	pc, err := o.problem(r)
	if err != nil {
		return nil, err
	}
	dir, _, err := kernelCacheDir(o.CacheDir)
	if err != nil {
		return nil, err
	}
	nv, err := jit.NewNVRTC()
	if err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	cache, err := jit.New(jit.Config{Compiler: nv, Dir: dir})
	if err != nil {
		return nil, err
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
		bld, err = flexcuda.NewDFlashBuilder(cache, o.BlockSize, o.Block, flex.DefaultBlock)
	} else {
		bld, err = flexcuda.NewBuilder(cache, pc.mask, o.Block, flex.DefaultBlock)
	}
	if err != nil {
		return nil, err
	}
	rep := &cudaAttnReport{Device: "cuda", GPU: w.Info().Name, Mask: o.Mask, DType: o.DType.String(), Dims: d, Spec: att.Spec().Key(),
		Reps: [2]int{o.Reps, o.RepsFB}, AllowedPairs: pc.pairs * float64(d.HeadsQ)}
	rep.Density = pc.pairs / (float64(d.Batch) * float64(d.LenQ) * float64(d.LenKV))
	rep.Compile.CacheDir = dir

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

	cbm, err := flex.NewBlockMask(pc.mask, pc.args, d, o.Block, flex.DefaultBlock)
	if err != nil {
		return nil, err
	}
	rep.BlockMask.CPUBuildMS = msf(cbm.Stats.Build)
	rep.BlockMask.Partial, rep.BlockMask.Full, rep.BlockMask.Empty = cbm.Stats.Partial, cbm.Stats.Full, cbm.Stats.Empty
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
	rep.ForwardTFLOPS = 4 * float64(d.HeadDim) * rep.AllowedPairs / rep.ForwardMS / 1e9
	if rep.FwdBwdMS > 0 {
		rep.FwdBwdTFLOPS = 14 * float64(d.HeadDim) * rep.AllowedPairs / rep.FwdBwdMS / 1e9
	}
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

func timeAttention(dev *gpu.Device, att *flexcuda.Attention, bld *flexcuda.Builder, pc *cudaBenchCase, cbm *flex.BlockMask,
	in halfInputs, o cudaBenchOptions, rep *cudaAttnReport) error {
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
func saveCall(dev *gpu.Device, att *flexcuda.Attention, c *flexcuda.Call, pc *cudaBenchCase, in halfInputs, o cudaBenchOptions) error {
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

func printCUDAReport(rep *cudaAttnReport, compileOnly bool) {
	fmt.Printf("flex attention on %s (%s), mask %s, %s, dims %+v\nkernels %s\n\n", rep.GPU, rep.Device, rep.Mask, rep.DType, rep.Dims, rep.Spec)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	if !compileOnly {
		fmt.Fprintln(w, "pass\tmedian ms\tuseful TFLOP/s\truns\t")
		fmt.Fprintf(w, "forward\t%.3f\t%.1f\t%d\t\n", rep.ForwardMS, rep.ForwardTFLOPS, rep.Reps[0])
		if rep.FwdBwdMS > 0 {
			fmt.Fprintf(w, "forward+backward\t%.3f\t%.1f\t%d\t\n", rep.FwdBwdMS, rep.FwdBwdTFLOPS, rep.Reps[1])
		}
		w.Flush()
		fmt.Printf("\ndensity %.4f (allowed pairs), block density %.4f; block mask (%s): GPU build %.4f ms, CPU build %.2f ms, lists match: %v; %d partial, %d full, %d empty blocks\n",
			rep.Density, rep.BlockDensity, rep.BlockMask.Source, rep.BlockMask.GPUBuildMS, rep.BlockMask.CPUBuildMS,
			rep.BlockMask.ListsMatch, rep.BlockMask.Partial, rep.BlockMask.Full, rep.BlockMask.Empty)
		fmt.Println("Useful TFLOP/s count allowed pairs only (4·D flops per pair forward, 14·D forward+backward).")
	}
	how := "compiled"
	if rep.Compile.FromDisk {
		how = "loaded from disk"
	}
	fmt.Printf("\nkernels %s in %.1f ms (%d compiles, cache %s)\n", how, rep.Compile.PrepareMS, rep.Compile.Compiles, rep.Compile.CacheDir)
	w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "kernel\tregisters\tlocal bytes\tthreads\tcompile ms\t")
	for _, k := range rep.Compile.Kernels {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%.0f\t\n", k.Name, k.Registers, k.LocalBytes, k.Threads, k.CompileMS)
	}
	w.Flush()
}
