package main

import (
	"dflash/internal/atomicfile"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"dflash/gpu"
	"dflash/recipe/decodebench"
	"dflash/tensor/tensorcuda"
	"dflash/train"
)

// decodeFlags are the flags of `dflash bench decode`, bound with
// train.BindOptions, then copied into decodebench.Options.
type decodeFlags struct {
	Device        string  `yaml:"device" choice:"cpu,cuda" help:"device: cpu or cuda (GPU 0)"`
	TargetName    string  `yaml:"target" help:"target shape, random weights: a name of the usage line"`
	JSON          bool    `yaml:"json" help:"print one JSON object instead of a table"`
	JSONFile      string  `yaml:"json-file" help:"also write the JSON object to this file"`
	Context       int     `yaml:"context" range:">=1" help:"positions in the cache before each pass (a random prompt prefilled once)"`
	BlockSize     int     `yaml:"block-size" range:">=2" help:"tokens of a verified and of a proposed block"`
	DrafterLayers int     `yaml:"drafter-layers" range:">=1" help:"drafter decoder layers (default taps)"`
	Reps          int     `yaml:"reps" range:">=1" help:"timed repetitions of each pass (median and minimum reported)"`
	Warmup        int     `yaml:"warmup" range:">=0" help:"untimed repetitions of each pass first"`
	Seed          uint64  `yaml:"seed" range:">=0" help:"random seed for weights and token ids"`
	HBMPeak       float64 `yaml:"hbm-peak" range:">=0" help:"peak memory bandwidth in bytes/s that the bounds divide by (0: the GPU's, from its datasheet or its driver; the CPU has none)"`
	DryRun        bool    `yaml:"dry-run" help:"allocate and time nothing: print each pass's bytes and bound"`
	Profile       bool    `yaml:"profile" help:"cuda: each pass once more with every op timed on the GPU (events around each op, no graphs): a table of ops by pass, largest first"`
}

// benchDecode runs `dflash bench decode`: flags parsed into
// decodebench.Options.
func benchDecode(args []string) error {
	fs := newFlagSet("bench decode", "bench decode --device cpu|cuda --target "+strings.Join(decodebench.TargetNames(), "|")+" [--json] [--json-file FILE] [flags]")
	f := decodeFlags{Device: "cpu", TargetName: "qwen3-0.6b", Context: decodebench.DefaultContext, BlockSize: decodebench.DefaultBlockSize,
		DrafterLayers: decodebench.DefaultDrafterLayers, Reps: 20, Warmup: 3, Seed: 1}
	cacheDir := fs.String("cache-dir", "", "cuda: "+cacheDirUsage)
	if err := parseOptions(fs, train.BindOptions(fs, &f), args); err != nil {
		return err
	}
	o := decodebench.Options{Device: f.Device, TargetName: f.TargetName, Context: f.Context, BlockSize: f.BlockSize,
		DrafterLayers: f.DrafterLayers, Reps: f.Reps, Warmup: f.Warmup, Seed: f.Seed, HBMPeak: f.HBMPeak, DryRun: f.DryRun, Profile: f.Profile}
	var err error
	if o.Target, err = decodebench.Target(o.TargetName); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Profile && (o.Device != "cuda" || o.DryRun) {
		return fmt.Errorf("--profile times ops on the GPU: it needs --device cuda and no --dry-run")
	}
	var rep *decodebench.Report
	switch {
	case o.Device == "cuda" && o.DryRun:
		// no GPU opened: its peak read from the driver when there is one
		rep, err = decodebench.RunOn(o, &decodebench.Env{HBMPeak: func() (float64, string) {
			info, err := gpu.QueryInfo(0)
			if err != nil {
				first, _, _ := strings.Cut(err.Error(), "\n")
				return 0, fmt.Sprintf("unknown (no GPU 0 to ask: %s): give --hbm-peak", first)
			}
			return hbmPeakOf(info)
		}})
	case o.Device == "cuda":
		var dir string
		if dir, _, err = kernelCacheDir(*cacheDir); err != nil {
			return err
		}
		rep, err = benchDecodeCUDA(o, dir)
	default:
		rep, err = decodebench.Run(o)
	}
	if err != nil {
		return err
	}
	if f.JSONFile != "" {
		if err := atomicfile.Write(f.JSONFile, func(w io.Writer) error { return writeJSON(w, rep) }); err != nil {
			return fmt.Errorf("--json-file: %w", err)
		}
	}
	if f.JSON {
		return writeJSON(os.Stdout, rep)
	}
	printDecodeReport(rep)
	return nil
}

// hbmPeakOf is gpu.Info.HBMPeak as an Env.HBMPeak answers: 0 with the
// reason when it is unknown.
func hbmPeakOf(info gpu.Info) (float64, string) {
	peak, source, err := info.HBMPeak()
	if err != nil {
		return 0, err.Error()
	}
	return peak, source
}

// benchDecodeCUDA runs the decode benchmark o on GPU 0 through the CUDA
// tensor backend (bf16 weights and KV caches), each repetition timed by
// events around it (gpu.Device.Time), with the GPU's launch count and
// peak memory bandwidth.
func benchDecodeCUDA(o decodebench.Options, cacheDir string) (*decodebench.Report, error) {
	var rep *decodebench.Report
	name, err := onGPU0(cacheDir, func(d *gpu.Device, b *tensorcuda.Backend) error {
		env := &decodebench.Env{Backend: b, Time: d.Time, Sync: d.Synchronize, Launches: d.Launches,
			Timing:  "CUDA events on the default stream around each call, the argmax ids read back included (gpu.Device.Time)",
			HBMPeak: func() (float64, string) { return hbmPeakOf(d.Info()) }}
		var err error
		rep, err = decodebench.RunOn(o, env)
		return err
	})
	if err != nil {
		return nil, err
	}
	rep.GPU = name
	return rep, nil
}

// printDecodeReport prints rep as a table of passes and one of implied
// speedups (a dry run: bytes and bounds only).
func printDecodeReport(r *decodebench.Report) {
	where := r.Device
	switch {
	case r.GPU != "":
		where = fmt.Sprintf("%s (%s)", r.GPU, r.Device)
	case r.Threads > 0:
		where = fmt.Sprintf("%s, %d threads", r.Device, r.Threads)
	}
	fmt.Printf("decoding passes on %s: target %s (%.3gB params, %d layers), drafter %d layers (%.1fM params, taps %v), context %d, block %d; %s weights, %s KV\n",
		where, r.Target, r.TargetParams/1e9, r.TargetLayers, r.DrafterLayers, r.DrafterParams/1e6, r.Taps, r.Context, r.BlockSize, r.WeightDType, r.KVDType)
	if r.DryRun {
		fmt.Println("dry run: nothing timed")
	} else {
		fmt.Printf("%d timed repetitions of each pass after %d warm-up; %s; setup %.1f s\n", r.Reps, r.Warmup, r.Timing, r.SetupMS/1e3)
	}
	fmt.Println()
	num := func(v float64, format string) string { // 0: unknown
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf(format, v)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "pass\ttokens\tmedian ms\tmin ms\tweights GB\tKV MB\tbound ms\tx bound\tlaunches\t")
	for _, p := range r.Phases {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%.3f\t%.1f\t%s\t%s\t%s\t\n", p.Name, p.Tokens, num(p.MedianMS, "%.3f"), num(p.MinMS, "%.3f"),
			float64(p.WeightBytes)/1e9, float64(p.KVBytes)/1e6, num(p.BoundMS, "%.3f"), num(p.Ratio, "%.2f"), num(float64(p.Launches), "%.0f"))
	}
	w.Flush()
	fmt.Printf("bounds: bytes / %s bytes/s (%s)\n\n", num(r.HBMPeak, "%.4g"), r.HBMPeakSource)
	fmt.Printf("implied speedup = %s\n", r.SpeedupFormula)
	w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "tau\tmeasured\tat the bounds\t")
	for _, s := range r.Speedups {
		fmt.Fprintf(w, "%g\t%s\t%s\t\n", s.Tau, num(s.Measured, "%.2fx"), num(s.Bound, "%.2fx"))
	}
	w.Flush()
	printOpTimes("profiled passes (one more run of each, every op between two events, no graphs)", r.Ops, 40)
}
