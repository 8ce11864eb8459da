package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"dflash/flex"
)

func init() {
	register(&command{name: "bench", summary: "benchmarks: attention", run: func(args []string) error {
		return subcommands("bench", map[string]*command{
			"attention": {name: "attention", summary: "block-sparse flex attention versus the dense masked reference", run: benchAttention},
		}, args)
	}})
}

// attnResult is one timed pass (forward or forward+backward).
type attnResult struct {
	SparseMS     float64 `json:"sparse_ms"`
	DenseMS      float64 `json:"dense_ms"`
	Speedup      float64 `json:"speedup"`
	Density      float64 `json:"density"`
	BlockDensity float64 `json:"block_density"`
	SparseGFLOPS float64 `json:"sparse_gflops"`
	DenseGFLOPS  float64 `json:"dense_gflops"`
	MaxAbsDiff   float64 `json:"max_abs_diff"`
}

// blockMaskReport describes a block mask build.
type blockMaskReport struct {
	Dims                    flex.Dims `json:"dims"`
	Block                   [2]int    `json:"block"`
	BuildMS                 float64   `json:"build_ms"`
	IndexBytes              int       `json:"index_bytes"`
	AllocBytes              uint64    `json:"alloc_bytes"`
	Blocks                  int       `json:"blocks"`
	Empty                   int       `json:"empty"`
	Partial                 int       `json:"partial"`
	Full                    int       `json:"full"`
	PartialFraction         float64   `json:"partial_fraction"`
	IntervalPartialFraction float64   `json:"interval_partial_fraction"`
	ExactPartialFraction    float64   `json:"exact_partial_fraction"`
	ExactBuildMS            float64   `json:"exact_build_ms"`
}

type attnReport struct {
	Device          string           `json:"device"`
	Mask            string           `json:"mask"`
	DType           string           `json:"dtype"`
	Dims            flex.Dims        `json:"dims"`
	Threads         int              `json:"threads"`
	Reps            int              `json:"reps"`
	Forward         attnResult       `json:"forward"`
	ForwardBackward attnResult       `json:"forward_backward"`
	BlockMask       blockMaskReport  `json:"block_mask"`
	DFlashFullSize  *blockMaskReport `json:"block_mask_dflash_full_size,omitempty"`
	DenseMaskMS     float64          `json:"dense_mask_ms"`
}

func benchAttention(args []string) error {
	if isCUDABench(args) {
		return benchAttentionCUDA(args) // its own flags: see bench_cuda.go
	}
	fs := newFlagSet("bench attention", "bench attention --device cpu --mask causal|dflash|document|window [--json] [flags]")
	device := fs.String("device", "cpu", "device: cpu or cuda (cuda takes the flags listed by --device cuda --help)")
	mask := fs.String("mask", "dflash", "mask: causal, dflash, document or window")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	dtype := fs.String("dtype", "float32", "element type: float32 or float64")
	batch := fs.Int("batch", 1, "batch size")
	heads := fs.Int("heads", 4, "query heads")
	kvHeads := fs.Int("kv-heads", 1, "key/value heads (divides --heads)")
	headDim := fs.Int("head-dim", 128, "head dimension")
	anchors := fs.Int("anchors", 128, "dflash: draft blocks (anchors) per sequence")
	blockSize := fs.Int("block-size", 16, "dflash: draft block size")
	context := fs.Int("context", 768, "dflash: context length")
	seq := fs.Int("seq", 2048, "causal, document, window: sequence length (queries = keys)")
	window := fs.Int("window", 256, "window: sliding window size")
	docLen := fs.Int("doc-len", 256, "document: mean document length")
	block := fs.Int("block", flex.DefaultBlock, "block-mask block edge (queries and keys)")
	reps := fs.Int("reps", 3, "timed repetitions of each pass (the fastest is reported)")
	seed := fs.Uint64("seed", 1, "random seed for inputs, anchors and documents")
	fullSize := fs.Bool("full-size-mask", true, "dflash: also report the block mask at 512 anchors x 16, context 3072")
	dense := fs.Bool("dense", true, "also time the dense masked reference (slow at full sizes)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *device != "cpu" {
		return fmt.Errorf("--device %q: unknown device (cpu or cuda)", *device)
	}
	if *reps < 1 {
		return fmt.Errorf("--reps %d: must be >= 1", *reps)
	}
	for name, v := range map[string]int{"batch": *batch, "heads": *heads, "kv-heads": *kvHeads, "head-dim": *headDim,
		"anchors": *anchors, "block-size": *blockSize, "context": *context, "seq": *seq, "window": *window, "doc-len": *docLen, "block": *block} {
		if v < 1 {
			return fmt.Errorf("--%s %d: must be >= 1", name, v)
		}
	}
	if *heads%*kvHeads != 0 {
		return fmt.Errorf("--heads %d is not a multiple of --kv-heads %d", *heads, *kvHeads)
	}
	r := rand.New(rand.NewPCG(*seed, *seed+1))
	var prog *flex.MaskProgram
	var margs *flex.Args
	d := flex.Dims{Batch: *batch, HeadsQ: *heads, HeadsKV: *kvHeads, LenQ: *seq, LenKV: *seq, HeadDim: *headDim} // causal, window, document
	switch *mask {
	case "dflash":
		d = flex.DFlashDims(*batch, *heads, *kvHeads, *anchors, *blockSize, *context, *headDim)
		prog, margs = flex.DFlashMask(*blockSize), dflashArgs(r, *batch, *anchors, *context)
	case "causal":
		prog, margs = flex.Causal(), flex.NewArgs()
	case "window":
		prog, margs = flex.SlidingWindow(*window), flex.NewArgs()
	case "document":
		ids := make([]int32, *batch**seq)
		for b := 0; b < *batch; b++ {
			id := int32(0)
			for i := 0; i < *seq; i++ {
				if r.IntN(*docLen) == 0 {
					id++
				}
				ids[b**seq+i] = id
			}
		}
		prog, margs = flex.Document(true), flex.NewArgs().SetIntTensor(flex.DocIDs, ids, *batch, *seq)
	default:
		return fmt.Errorf("--mask %q: unknown mask (causal, dflash, document or window)", *mask)
	}
	rep := &attnReport{Device: *device, Mask: *mask, DType: *dtype, Dims: d, Threads: runtime.GOMAXPROCS(0), Reps: *reps}
	slog.Info("bench attention", "mask", *mask, "dims", fmt.Sprintf("%+v", d), "dtype", *dtype, "threads", rep.Threads)

	bmr, bm, err := measureBlockMask(prog, margs, d, *block)
	if err != nil {
		return err
	}
	rep.BlockMask = bmr
	if *mask == "dflash" && *fullSize {
		fd := flex.DFlashDims(1, 32, 8, 512, 16, 3072, 128)
		full, _, err := measureBlockMask(flex.DFlashMask(16), dflashArgs(r, 1, 512, 3072), fd, flex.DefaultBlock)
		if err != nil {
			return err
		}
		rep.DFlashFullSize = &full
	}
	start := time.Now()
	dm, err := flex.NewDenseMask(prog, margs, d, 4<<30)
	if err != nil {
		return err
	}
	rep.DenseMaskMS = ms(time.Since(start))
	density := dm.Density()
	if !*dense {
		dm = nil
	}

	switch *dtype {
	case "float32":
		runPasses[float32](rep, d, bm, dm, r, *reps)
	case "float64":
		runPasses[float64](rep, d, bm, dm, r, *reps)
	default:
		return fmt.Errorf("--dtype %q: float32 or float64", *dtype)
	}
	pairs := density * float64(d.Batch*d.HeadsQ) * float64(d.LenQ) * float64(d.LenKV)
	for _, x := range []struct {
		res   *attnResult
		flops float64
	}{{&rep.Forward, 4 * float64(d.HeadDim) * pairs}, {&rep.ForwardBackward, 14 * float64(d.HeadDim) * pairs}} {
		x.res.Density, x.res.BlockDensity = density, bm.Density()
		x.res.SparseGFLOPS = x.flops / x.res.SparseMS / 1e6
		if dm != nil {
			x.res.Speedup = x.res.DenseMS / x.res.SparseMS
			x.res.DenseGFLOPS = x.flops / x.res.DenseMS / 1e6
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printAttnTable(rep)
	return nil
}

// dflashArgs draws sorted anchors uniformly in [0, ctx) for each sequence.
func dflashArgs(r *rand.Rand, batch, anchors, ctx int) *flex.Args {
	a := make([]int32, batch*anchors)
	for b := 0; b < batch; b++ {
		row := a[b*anchors : (b+1)*anchors]
		for i := range row {
			row[i] = int32(r.IntN(ctx))
		}
		slices.Sort(row)
	}
	return flex.DFlashArgs(ctx, a, anchors, nil)
}

func measureBlockMask(prog *flex.MaskProgram, args *flex.Args, d flex.Dims, block int) (blockMaskReport, *flex.BlockMask, error) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	bm, err := flex.NewBlockMask(prog, args, d, block, block)
	if err != nil {
		return blockMaskReport{}, nil, err
	}
	runtime.ReadMemStats(&m1)
	st := bm.Stats
	total := float64(st.Empty + st.Partial + st.Full)
	rep := blockMaskReport{Dims: d, Block: [2]int{block, block}, BuildMS: ms(st.Build), IndexBytes: st.Bytes,
		AllocBytes: m1.TotalAlloc - m0.TotalAlloc, Blocks: int(total), Empty: st.Empty, Partial: st.Partial, Full: st.Full,
		PartialFraction: float64(st.Partial) / total, IntervalPartialFraction: float64(st.IntervalPartial) / total}
	ex, err := flex.NewBlockMask(prog, args, d, block, block, flex.Exact())
	if err != nil {
		return blockMaskReport{}, nil, err
	}
	rep.ExactPartialFraction = float64(ex.Stats.Partial) / total
	rep.ExactBuildMS = ms(ex.Stats.Build)
	slog.Info("block mask", "dims", fmt.Sprintf("%+v", d), "build_ms", rep.BuildMS, "partial", rep.PartialFraction,
		"interval_partial", rep.IntervalPartialFraction, "exact_partial", rep.ExactPartialFraction)
	return rep, bm, nil
}

func runPasses[T float32 | float64](rep *attnReport, d flex.Dims, bm *flex.BlockMask, dm *flex.DenseMask, r *rand.Rand, reps int) {
	gen := func(n int) []T {
		x := make([]T, n)
		for i := range x {
			x[i] = T(r.NormFloat64())
		}
		return x
	}
	q := gen(d.Batch * d.HeadsQ * d.LenQ * d.HeadDim)
	k := gen(d.Batch * d.HeadsKV * d.LenKV * d.HeadDim)
	v := gen(len(k))
	dout := gen(len(q))
	scale := 1 / math.Sqrt(float64(d.HeadDim))
	timeIt := func(f func()) float64 {
		s := time.Now()
		f()
		return ms(time.Since(s))
	}
	var so, sl, do, dl []T
	var sg, dg flex.Grads[T]
	rep.Forward = attnResult{SparseMS: math.Inf(1), DenseMS: math.Inf(1)}
	rep.ForwardBackward = rep.Forward
	// The passes are interleaved and the fastest of each kept, so that load
	// from other processes affects sparse and dense alike.
	for i := 0; i < reps; i++ {
		t := timeIt(func() { so, sl = flex.Forward(d, q, k, v, bm, nil, nil, scale) })
		rep.Forward.SparseMS = min(rep.Forward.SparseMS, t)
		if dm != nil {
			t = timeIt(func() { do, dl = flex.DenseForward(d, q, k, v, dm, nil, nil, scale) })
			rep.Forward.DenseMS = min(rep.Forward.DenseMS, t)
		}
		t = timeIt(func() {
			so, sl = flex.Forward(d, q, k, v, bm, nil, nil, scale)
			sg = flex.Backward(d, q, k, v, so, sl, dout, bm, nil, nil, scale)
		})
		rep.ForwardBackward.SparseMS = min(rep.ForwardBackward.SparseMS, t)
		if dm != nil {
			t = timeIt(func() {
				do, dl = flex.DenseForward(d, q, k, v, dm, nil, nil, scale)
				dg = flex.DenseBackward(d, q, k, v, do, dl, dout, dm, nil, nil, scale)
			})
			rep.ForwardBackward.DenseMS = min(rep.ForwardBackward.DenseMS, t)
		}
		slog.Info("timed", "rep", i+1, "forward_sparse_ms", rep.Forward.SparseMS, "forward_dense_ms", rep.Forward.DenseMS,
			"fb_sparse_ms", rep.ForwardBackward.SparseMS, "fb_dense_ms", rep.ForwardBackward.DenseMS)
	}
	if dm == nil {
		rep.Forward.DenseMS, rep.ForwardBackward.DenseMS = 0, 0
		return
	}
	rep.Forward.MaxAbsDiff = maxAbsDiff(so, do)
	rep.ForwardBackward.MaxAbsDiff = max(maxAbsDiff(sg.DQ, dg.DQ), maxAbsDiff(sg.DK, dg.DK), maxAbsDiff(sg.DV, dg.DV))
}

func maxAbsDiff[T float32 | float64](a, b []T) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func printAttnTable(rep *attnReport) {
	fmt.Printf("flex attention, %s, mask %s, %s, dims %+v, %d threads, best of %d\n\n", rep.Device, rep.Mask, rep.DType, rep.Dims, rep.Threads, rep.Reps)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "pass\tsparse ms\tGFLOP/s\tdense ms\tGFLOP/s\tspeedup\tdensity\tblock density\tmax |diff|\t")
	for _, x := range []struct {
		name string
		r    attnResult
	}{{"forward", rep.Forward}, {"forward+backward", rep.ForwardBackward}} {
		fmt.Fprintf(w, "%s\t%.1f\t%.2f\t%.1f\t%.2f\t%.2fx\t%.1f%%\t%.1f%%\t%.2g\t\n", x.name, x.r.SparseMS, x.r.SparseGFLOPS,
			x.r.DenseMS, x.r.DenseGFLOPS, x.r.Speedup, 100*x.r.Density, 100*x.r.BlockDensity, x.r.MaxAbsDiff)
	}
	w.Flush()
	fmt.Println("\nGFLOP/s count allowed pairs only (4·D flops per pair forward, 14·D forward+backward).")
	for _, b := range []*blockMaskReport{&rep.BlockMask, rep.DFlashFullSize} {
		if b == nil {
			continue
		}
		fmt.Printf("\nblock mask %dx%d for %+v: built in %.2f ms, %d index bytes (%d allocated); %d blocks: %d empty, %d partial, %d full\n",
			b.Block[0], b.Block[1], b.Dims, b.BuildMS, b.IndexBytes, b.AllocBytes, b.Blocks, b.Empty, b.Partial, b.Full)
		fmt.Printf("  partial fraction %.4f (interval evaluation alone %.4f, exact classification %.4f, built in %.1f ms)\n",
			b.PartialFraction, b.IntervalPartialFraction, b.ExactPartialFraction, b.ExactBuildMS)
	}
	fmt.Printf("\ndense mask built in %.1f ms (not timed in the dense passes)\n", rep.DenseMaskMS)
}
