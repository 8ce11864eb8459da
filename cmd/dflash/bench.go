package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"dflash/flex"
	"dflash/flex/flexbench"
	"dflash/internal/meminfo"
	"dflash/recipe/stepbench"
	"dflash/tensor"
	"dflash/train"
)

func init() {
	register(&command{name: "bench", summary: "benchmarks: attention, the drafter training step, the decoding passes, checkpoint writes", run: func(args []string) error {
		return subcommands("bench", map[string]*command{
			"attention": {name: "attention", summary: "flex attention on the CPU (against the dense masked reference) or the GPU", run: benchAttention},
			"step":      {name: "step", summary: "one drafter training step, phase by phase, for a named target shape with random weights", run: benchStep},
			"decode":    {name: "decode", summary: "a decode step, a verification and a drafter proposal against their HBM bounds, for a named target shape with random weights", run: benchDecode},
			"write":     {name: "write", summary: "a checkpoint's write through the run's path beside the disk's own direct write speed", run: benchWrite},
		}, args)
	}})
}

// attentionFlags are the flags of `dflash bench attention`, bound with
// train.BindOptions (every number checked against its range when the flags are
// parsed, and shown by --help), then copied into flexbench.Options.
type attentionFlags struct {
	Device        string `yaml:"device" choice:"cpu,cuda" help:"device: cpu or cuda (GPU 0)"`
	Mask          string `yaml:"mask" choice:"causal,dflash,document,window" help:"mask"`
	JSON          bool   `yaml:"json" help:"print one JSON object instead of a table"`
	Batch         int    `yaml:"batch" range:">=1" help:"batch size"`
	Heads         int    `yaml:"heads" range:">=1" help:"query heads"`
	KVHeads       int    `yaml:"kv-heads" range:">=1" help:"key/value heads (divides --heads)"`
	HeadDim       int    `yaml:"head-dim" range:">=1" help:"head dimension (cuda: 64, 128 or 256)"`
	Anchors       int    `yaml:"anchors" range:">=1" help:"dflash: draft blocks (anchors) per sequence, distinct, the same in every sequence"`
	BlockSize     int    `yaml:"block-size" range:">=1" help:"dflash: draft block size"`
	Context       int    `yaml:"context" range:">=1" help:"dflash: context length"`
	Seq           int    `yaml:"seq" range:">=1" help:"causal, document, window: sequence length (queries = keys)"`
	Window        int    `yaml:"window" range:">=1" help:"window: sliding window size"`
	DocLen        int    `yaml:"doc-len" range:">=1" help:"document: document length (documents of equal length, packed)"`
	Block         int    `yaml:"block" range:">=1" help:"block-mask q block (the kv block is 128)"`
	Reps          int    `yaml:"reps" range:">=0" help:"timed forward passes, the median is reported (0: 3 on cpu, 30 on cuda)"`
	RepsFB        int    `yaml:"reps-fb" range:">=0" help:"timed forward+backward passes (0: 3 on cpu, 20 on cuda)"`
	Warmup        int    `yaml:"warmup" range:">=-1" help:"untimed passes before each timing (-1: 1 on cpu, 5 on cuda)"`
	Seed          uint64 `yaml:"seed" range:">=0" help:"random seed for inputs and anchors"`
	ForwardOnly   bool   `yaml:"forward-only" help:"time the forward pass only"`
	Dense         bool   `yaml:"dense" help:"cpu: also time the dense masked reference (slow at full sizes)"`
	FullSizeMask  bool   `yaml:"full-size-mask" help:"cpu, dflash: also report the block mask at 512 anchors x 16, context 3072"`
	BuildReps     int    `yaml:"build-reps" range:">=1" help:"cuda: timed GPU block-mask builds"`
	CompileOnly   bool   `yaml:"compile-only" help:"cuda: only compile or load the kernels and report the time (cold or warm from disk)"`
	CPUBlockMask  bool   `yaml:"cpu-block-mask" help:"cuda: attend with the CPU-built block mask instead of the GPU-built one"`
	Deterministic bool   `yaml:"deterministic" help:"cuda: time the deterministic backward (no atomics: bit-identical dQ, dK, dV)"`
	Save          string `yaml:"save" help:"cuda: after timing, write one call's inputs and outputs to this safetensors file (bench/flex_peer.py --check compares them with PyTorch)"`
}

// benchAttention runs `dflash bench attention`: one flag set for both
// devices, parsed into flexbench.Options.
func benchAttention(args []string) error {
	fs := newFlagSet("bench attention", "bench attention --device cpu|cuda --mask causal|dflash|document|window [--json] [flags]")
	f := attentionFlags{Device: "cpu", Mask: "dflash", Batch: 1, Heads: 4, KVHeads: 1, HeadDim: 128, Anchors: 128, BlockSize: 16,
		Context: 768, Seq: 2048, Window: 256, DocLen: 256, Block: flex.DefaultBlock, Warmup: -1, Seed: 1, Dense: true,
		FullSizeMask: true, BuildReps: 50}
	var o flexbench.Options
	fs.Var(&o.DType, "dtype", "element type: f32 or f64 on cpu (default f32), bf16 or f16 on cuda (default bf16)")
	cacheDir := fs.String("cache-dir", "", "cuda: "+cacheDirUsage)
	if err := parseOptions(fs, train.BindOptions(fs, &f), args); err != nil {
		return err
	}
	o.Device, o.Mask, o.Batch, o.Heads, o.KVHeads, o.HeadDim = f.Device, f.Mask, f.Batch, f.Heads, f.KVHeads, f.HeadDim
	o.Anchors, o.BlockSize, o.Context, o.Seq, o.Window, o.DocLen, o.Block = f.Anchors, f.BlockSize, f.Context, f.Seq, f.Window, f.DocLen, f.Block
	o.Reps, o.RepsFB, o.Warmup, o.Seed, o.BuildReps = f.Reps, f.RepsFB, f.Warmup, f.Seed, f.BuildReps
	o.ForwardOnly, o.Dense, o.FullSizeMask, o.CompileOnly = f.ForwardOnly, f.Dense, f.FullSizeMask, f.CompileOnly
	o.CPUBlockMask, o.Deterministic, o.Save = f.CPUBlockMask, f.Deterministic, f.Save
	if o.Device == "cuda" {
		dir, _, err := kernelCacheDir(*cacheDir)
		if err != nil {
			return err
		}
		o.CacheDir = dir
	}
	rep, err := flexbench.Run(o)
	if err != nil {
		return err
	}
	if f.JSON {
		return writeJSON(os.Stdout, rep)
	}
	printAttnReport(rep, o.CompileOnly)
	return nil
}

// printAttnReport prints rep as tables, the same on both devices.
func printAttnReport(rep *flexbench.Report, compileOnly bool) {
	where := rep.Device
	if rep.GPU != "" {
		where = rep.GPU + " (" + rep.Device + ")"
	} else if rep.Threads > 0 {
		where = fmt.Sprintf("%s, %d threads", rep.Device, rep.Threads)
	}
	fmt.Printf("flex attention on %s, mask %s, %s, dims %+v\n", where, rep.Mask, rep.DType, rep.Dims)
	if rep.Spec != "" {
		fmt.Printf("kernels %s\n", rep.Spec)
	}
	if !compileOnly {
		printPasses(rep)
	}
	if c := rep.Compile; c != nil {
		how := "compiled"
		if c.FromDisk {
			how = "loaded from disk"
		}
		fmt.Printf("\nkernels %s in %.1f ms (%d compiles, cache %s)\n", how, c.PrepareMS, c.Compiles, c.CacheDir)
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "kernel\tregisters\tlocal bytes\tthreads\tcompile ms\t")
		for _, k := range c.Kernels {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%.0f\t\n", k.Name, k.Registers, k.LocalBytes, k.Threads, k.CompileMS)
		}
		w.Flush()
	}
}

// printPasses prints the timed passes, the dense reference when timed, and
// the block masks.
func printPasses(rep *flexbench.Report) {
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	dn := rep.Dense
	if dn != nil {
		fmt.Fprintln(w, "pass\tmedian ms\tuseful TFLOP/s\truns\tdense ms\tspeedup\tmax |diff|\t")
	} else {
		fmt.Fprintln(w, "pass\tmedian ms\tuseful TFLOP/s\truns\t")
	}
	row := func(name string, ms, tflops float64, runs int, dms, speedup, diff float64) {
		fmt.Fprintf(w, "%s\t%.3f\t%.4g\t%d\t", name, ms, tflops, runs)
		if dn != nil {
			fmt.Fprintf(w, "%.3f\t%.2fx\t%.2g\t", dms, speedup, diff)
		}
		fmt.Fprintln(w)
	}
	if dn == nil {
		dn = &flexbench.Dense{}
	}
	row("forward", rep.ForwardMS, rep.ForwardTFLOPS, rep.Reps[0], dn.ForwardMS, dn.ForwardSpeedup, dn.ForwardMaxDiff)
	if rep.FwdBwdMS > 0 {
		row("forward+backward", rep.FwdBwdMS, rep.FwdBwdTFLOPS, rep.Reps[1], dn.FwdBwdMS, dn.FwdBwdSpeedup, dn.FwdBwdMaxDiff)
	}
	w.Flush()
	fmt.Println("Useful TFLOP/s count allowed pairs only (4·D flops per pair forward, 14·D forward+backward).")
	bm := rep.BlockMask
	fmt.Printf("\ndensity %.4f (allowed pairs), block density %.4f; block mask (%s): CPU build %.3f ms", rep.Density, rep.BlockDensity, bm.Source, bm.CPUBuildMS)
	if bm.GPUBuildMS > 0 {
		fmt.Printf(", GPU build %.4f ms, lists match: %v", bm.GPUBuildMS, bm.ListsMatch)
	}
	fmt.Printf("; %d blocks: %d partial, %d full, %d empty; %d index bytes\n", bm.Blocks, bm.Partial, bm.Full, bm.Empty, bm.IndexBytes)
	if bm.Source == "cpu" {
		fmt.Printf("  partial fraction with interval evaluation alone %.4f, with exact classification %.4f (built in %.1f ms); %d bytes allocated\n",
			bm.IntervalPartialFraction, bm.ExactPartialFraction, bm.ExactBuildMS, bm.AllocBytes)
	}
	if f := rep.DFlashFullSize; f != nil {
		fmt.Printf("block mask at dflash 512 anchors x 16, context 3072: built in %.2f ms, %d index bytes; %d blocks: %d partial, %d full, %d empty\n",
			f.CPUBuildMS, f.IndexBytes, f.Blocks, f.Partial, f.Full, f.Empty)
		fmt.Printf("  partial fraction with interval evaluation alone %.4f, with exact classification %.4f (built in %.1f ms)\n",
			f.IntervalPartialFraction, f.ExactPartialFraction, f.ExactBuildMS)
	}
	if rep.Dense != nil {
		fmt.Printf("dense mask built in %.1f ms (not timed in the dense passes)\n", rep.Dense.MaskMS)
	}
}

// stepFlags are the flags of `dflash bench step`, bound with train.BindOptions
// (every number checked against its range when the flags are parsed, and shown
// by --help), then copied into stepbench.Options.
type stepFlags struct {
	Device        string  `yaml:"device" choice:"cpu,cuda" help:"device: cpu or cuda (GPU 0)"`
	TargetName    string  `yaml:"target-config" help:"target shape, random weights: a name of the usage line"`
	JSON          bool    `yaml:"json" help:"print one JSON object instead of a table"`
	SeqLen        int     `yaml:"seq-len" range:">=2" help:"tokens per sequence (the last 7/8 are the assistant's)"`
	Batch         int     `yaml:"batch" range:">=1" help:"sequences per step"`
	Anchors       int     `yaml:"anchors" range:">=1" help:"draft blocks (anchors) per sequence"`
	BlockSize     int     `yaml:"block-size" range:">=2" help:"draft block size"`
	DrafterLayers int     `yaml:"drafter-layers" range:">=1" help:"drafter decoder layers"`
	Taps          []int   `yaml:"taps" range:">=0" help:"0-based target layers to tap (default: one per drafter layer, spread from 1 to L-3)"`
	Steps         int     `yaml:"steps" range:">=1" help:"timed steps (their means are reported)"`
	Warmup        int     `yaml:"warmup" range:">=0" help:"untimed steps first"`
	Seed          uint64  `yaml:"seed" range:">=0" help:"random seed for weights, tokens and anchors"`
	PeakTFLOPS    float64 `yaml:"peak-tflops" range:">=0" help:"peak TFLOP/s for the MFU (0: the device's, see docs/PERF.md)"`
	LossChunk     int     `yaml:"loss-chunk" range:">=0" help:"block slots whose logits exist at once in the cross-entropy (0: the backend's default, 4M logits on the CPU and 512M on CUDA)"`
	DryRun        bool    `yaml:"dry-run" help:"allocate and time nothing: print the FLOP count and the memory estimate of the shape"`
	TargetDType   string  `yaml:"target-dtype" choice:"bf16,fp8" help:"cuda: the target's products in bf16, or fp8 (E4M3, scales per output channel and per token); fp8 adds each tap's relative error against the bf16 target"`
	DrafterOnly   bool    `yaml:"drafter-only" help:"time the drafter alone: its hidden states are given (random, kept on the device), the target does not run"`
	Profile       bool    `yaml:"profile" help:"cuda: one more step with every op timed on the GPU (events around each op): a table of ops by phase, largest first"`
}

// benchStep runs `dflash bench step`: flags parsed into stepbench.Options.
func benchStep(args []string) error {
	fs := newFlagSet("bench step", "bench step --device cpu|cuda --target-config "+strings.Join(stepbench.TargetNames(), "|")+" [--json] [flags]")
	f := stepFlags{Device: "cpu", TargetName: "qwen3-0.6b", TargetDType: "bf16", SeqLen: 512, Batch: 1, Anchors: 64, BlockSize: 16, DrafterLayers: 1,
		Steps: 3, Warmup: 1, Seed: 1}
	cacheDir := fs.String("cache-dir", "", "cuda: "+cacheDirUsage)
	if err := parseOptions(fs, train.BindOptions(fs, &f), args); err != nil {
		return err
	}
	o := stepbench.Options{Device: f.Device, TargetName: f.TargetName, SeqLen: f.SeqLen, Batch: f.Batch, Anchors: f.Anchors,
		BlockSize: f.BlockSize, DrafterLayers: f.DrafterLayers, Taps: f.Taps, Steps: f.Steps, Warmup: f.Warmup, Seed: f.Seed,
		PeakTFLOPS: f.PeakTFLOPS, LossChunk: f.LossChunk, DryRun: f.DryRun, DrafterOnly: f.DrafterOnly, Profile: f.Profile, TargetFP8: f.TargetDType == "fp8"}
	if o.Profile && o.Device != "cuda" {
		return fmt.Errorf("--profile times ops on the GPU: it needs --device cuda")
	}
	var err error
	if o.Target, err = stepbench.Target(o.TargetName); err != nil {
		return err
	}
	var rep *stepbench.Report
	if o.Device == "cuda" && !o.DryRun {
		if err := o.Validate(); err != nil {
			return err
		}
		var dir string
		if dir, _, err = kernelCacheDir(*cacheDir); err != nil {
			return err
		}
		rep, err = benchStepCUDA(o, dir)
	} else {
		rep, err = stepbench.Run(o)
	}
	if err != nil {
		return err
	}
	if f.JSON {
		return writeJSON(os.Stdout, rep)
	}
	printStepReport(rep)
	return nil
}

// printStepReport prints rep as a table of phases and a summary (a dry
// run: the FLOPs and the memory estimate).
func printStepReport(r *stepbench.Report) {
	where := r.Device
	switch {
	case r.GPU != "":
		where = fmt.Sprintf("%s (%s)", r.GPU, r.Device)
	case r.Threads > 0:
		where = fmt.Sprintf("%s, %d threads", r.Device, r.Threads)
	}
	run := fmt.Sprintf("layers 0..%d run", r.TargetLayers-1)
	if r.DrafterOnly {
		run = "not run: hidden states given"
	}
	fmt.Printf("drafter training step on %s: target %s (%.3gB params, %s, %s products), taps %v, %d drafter layers (%.1fM params)\n",
		where, r.Target, r.TargetParams/1e9, run, r.TargetDType, r.Taps, r.DrafterLayers, r.DrafterParams/1e6)
	if len(r.TapRelErr) > 0 {
		fmt.Printf("fp8 target: relative error of each tap against the bf16 target %s\n", fmtFloats(r.TapRelErr, "%.4f"))
	}
	m := r.Memory
	if r.Steps == 0 {
		f := r.FLOPs
		fmt.Printf("seq len %d, batch %d, %d anchors x block %d; dry run\n", r.SeqLen, r.Batch, r.Anchors, r.BlockSize)
		fmt.Printf("GFLOP per step: target forward %.1f, drafter forward %.1f, drafter backward %.1f, total %.1f\n",
			f.TargetForward/1e9, f.DrafterForward/1e9, f.DrafterBackward/1e9, f.Total()/1e9)
		fmt.Printf("CPU memory estimate (float32): %s = target weights %s + drafter state %s + activations %s\n", meminfo.Format(m.Total()),
			meminfo.Format(m.TargetWeights), meminfo.Format(m.DrafterState), meminfo.Format(m.Activations))
		return
	}
	fmt.Printf("seq len %d, batch %d, %d anchors x block %d; %d timed steps after %d warm-up\n\n", r.SeqLen, r.Batch, r.Anchors, r.BlockSize, r.Steps, r.Warmup)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "phase\tmean ms\tshare\tGFLOP\tMFU\t")
	p, f := r.Phases, r.FLOPs
	row := func(name string, ms, gflop, mfu float64) { // gflop, mfu < 0: not counted
		fmt.Fprintf(w, "%s\t%.1f\t%.1f%%\t", name, ms, 100*ms/r.StepMS)
		if gflop >= 0 {
			fmt.Fprintf(w, "%.1f\t", gflop)
		} else {
			fmt.Fprint(w, "\t")
		}
		if mfu >= 0 {
			fmt.Fprintf(w, "%.1f%%\t\n", 100*mfu)
		} else {
			fmt.Fprintln(w, "\t")
		}
	}
	row("input assembly", p.InputAssembly, -1, -1)
	row("target forward", p.TargetForward, f.TargetForward/1e9, r.MFU.TargetForward)
	row("drafter forward", p.DrafterForward, f.DrafterForward/1e9, -1)
	row("backward", p.Backward, f.DrafterBackward/1e9, -1)
	row("optimizer", p.Optimizer, -1, -1)
	row("step", r.StepMS, f.Total()/1e9, r.MFU.Step)
	w.Flush()
	fmt.Printf("drafter forward+backward MFU %.1f%%; block mask (inside the drafter forward, built apart) %.2f ms; step min %.1f ms, max %.1f ms\n",
		100*r.MFU.DrafterTrain, r.BlockMaskMS, r.MinMS, r.MaxMS)
	fmt.Printf("%.1f tokens/s, %.3f samples/s; MFU against %.4g TFLOP/s (%s)\n", r.TokensPerS, r.SamplesPerS, r.PeakTFLOPS, r.PeakSource)
	if r.GPU != "" {
		arena := "in chunks"
		if r.StepArenaInPlace {
			arena = "one range grown in place"
		}
		fmt.Printf("peak device memory %s held, %s in use (one step's storage %s at most in use, its arena, %s, reserving %s after the timed steps, %s at most); setup %.1f s, first step %.1f s (kernels compiled or loaded)\n",
			meminfo.Format(float64(r.PeakDeviceBytes)), meminfo.Format(float64(r.PeakDeviceInUseBytes)), meminfo.Format(float64(r.StepArenaBytes)), arena, meminfo.Format(float64(r.StepArenaReservedBytes)),
			meminfo.Format(float64(r.StepArenaMostReservedBytes)), r.SetupMS/1e3, r.FirstStepMS/1e3)
		if r.PerStep != nil {
			fmt.Printf("per step: %v\n", r.PerStep)
		}
		if r.Replays != nil {
			fmt.Printf("regions of the timed steps (CUDA graphs): %v\n", r.Replays)
		}
		printOpTimes("profiled step (one step after the timed ones, every op between two events)", r.Ops, 60)
		return
	}
	fmt.Printf("peak Go heap %s (marked live by a GC: %s), peak RSS %s; estimated before allocating %s\n", meminfo.Format(float64(r.PeakHeapBytes)),
		meminfo.Format(float64(r.PeakLiveBytes)), meminfo.Format(float64(r.PeakRSSBytes)), meminfo.Format(m.Total()))
}

// printOpTimes prints a --profile under title: each phase's time in ops and between
// them (uploads, the GPU waiting for its host), then the top kinds of op,
// largest first, with the GEMMs' TFLOP/s.
func printOpTimes(title string, ops []tensor.OpTime, top int) {
	if len(ops) == 0 {
		return
	}
	var total float64
	phases := map[string]*[2]float64{} // in ops, between them
	var order []string
	for _, o := range ops {
		ph := phases[o.Phase]
		if ph == nil {
			ph = new([2]float64)
			phases[o.Phase] = ph
			order = append(order, o.Phase)
		}
		if o.Op == tensor.BetweenOps {
			ph[1] += o.MS
		} else {
			ph[0] += o.MS
		}
		total += o.MS
	}
	slices.Sort(order)
	fmt.Printf("\n%s: %.1f ms from its first op to its last\n", title, total)
	for _, ph := range order {
		fmt.Printf("  %-34s %9.2f ms in ops, %7.2f ms between them\n", ph, phases[ph][0], phases[ph][1])
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "phase\top\tcalls\tms\t%\tTFLOP/s\t")
	for i, o := range ops {
		if i == top {
			break
		}
		rate := ""
		if o.FLOPs > 0 && o.MS > 0 {
			rate = fmt.Sprintf("%.0f", o.FLOPs/o.MS/1e9)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%.2f\t%.1f\t%s\t\n", o.Phase, o.Op, o.Calls, o.MS, 100*o.MS/total, rate)
	}
	w.Flush()
	if len(ops) > top {
		fmt.Printf("(%d more kinds of op; --json lists them all)\n", len(ops)-top)
	}
}

// fmtFloats formats xs with verb, space-separated.
func fmtFloats(xs []float64, verb string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf(verb, x)
	}
	return strings.Join(s, " ")
}
