package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"dflash/data"
	"dflash/data/chat"
	"dflash/data/tokenizer"
	"dflash/gpu"
	"dflash/internal/dirlock"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/recipe"
	"dflash/rendezvous"
	"dflash/spec"
	"dflash/tensor"
	"dflash/train"
	"dflash/train/traincuda"
)

// trainConfig is the configuration of `dflash train`: every field is both a flag
// (--drafter.block-size) and a YAML key (block-size under drafter:); docs/CONFIG.md
// is its table, generated from these tags (go test ./cmd/dflash -run TestConfigDoc -update).
type trainConfig struct {
	Workers       int     `yaml:"workers" range:">=0" help:"CPU goroutines (0: all cores)"`
	Device        string  `yaml:"device" choice:"cpu,cuda" help:"where the target and the drafter run: cpu, or cuda (the GPUs of --gpus, bf16 activations, fp32 master weights and optimizer)"`
	Deterministic bool    `yaml:"deterministic" help:"cuda: bit-identical runs and resumes (the deterministic attention backward, no atomic GEMM reductions; slower); the CPU always is"`
	PeakTFLOPS    float64 `yaml:"peak-tflops" range:">=0" help:"peak TFLOP/s of a rank's device that the mfu metric divides by (0: derived from the device: a GPU's architecture, SMs and clock, the CPU's cores, clock and FLOP/cycle; the log names the source)"`
	GPUs          string  `yaml:"gpus" help:"with --device cuda, the GPUs this process trains on, one data-parallel rank each (NCCL): ordinals 0,1,... or all (empty: GPU 0; a job of several processes takes each process's LOCAL_RANK)"`
	Rank          int     `yaml:"rank" range:">=-1" help:"this process's rank in a data-parallel job (-1: RANK from the environment, else 0)"`
	WorldSize     int     `yaml:"world-size" range:">=-1" help:"ranks in a data-parallel job, one per GPU (-1: WORLD_SIZE from the environment, else 1)"`
	Rendezvous    string  `yaml:"rendezvous" help:"host:port where rank 0 hands out the NCCL id (empty: MASTER_ADDR and MASTER_PORT from the environment)"`
	train.Config  `yaml:",inline"`
	Drafter       drafterOptions `yaml:"drafter"`
	Data          dataOptions    `yaml:"data"`
}

type drafterOptions struct {
	Layers       int     `yaml:"layers" range:">=1" help:"drafter decoder layers"`
	Taps         []int   `yaml:"taps" range:">=0" help:"target layers to tap, 0-based (empty: spread evenly from 1 to L-3, one per drafter layer)"`
	BlockSize    int     `yaml:"block-size" range:">=2" help:"draft block size B"`
	MaskTokenID  int     `yaml:"mask-token-id" range:">=-1" help:"mask token id (-1: the tokenizer's <|MASK|>, else the first id past the tokenizer's vocabulary)"`
	Gamma        float64 `yaml:"gamma" range:">=0" help:"loss decay gamma (0: the default for the block size)"`
	Anchors      int     `yaml:"anchors" range:">=1" help:"anchors sampled per sequence and step"`
	Intermediate int     `yaml:"intermediate-size" range:">=0" help:"drafter MLP width (0: the target's)"`
	Export       string  `yaml:"export" choice:"F32,BF16" help:"dtype of the exported drafter in OUT/drafter"`
}

// dataOptions holds data.Options, the sample rules `data prep` shares (its
// BlockSize is the drafter's), and how training batches and holds out.
type dataOptions struct {
	data.Options `yaml:",inline"`
	BatchSize    int     `yaml:"batch-size" range:">=1" help:"sequences per micro-batch"`
	Buckets      int     `yaml:"buckets" range:">=0" help:"group training batches into at most N length buckets chosen to pad least, each batch of a bucket one shape: batch-size rows, the bucket's length, min(anchors, length-1) anchor blocks (0: batches in data order, padded to their longest)"`
	EvalFraction float64 `yaml:"eval-fraction" range:"[0,1)" help:"fraction of conversations held out for evaluation (at least one is)"`
	EvalMax      int     `yaml:"eval-max" range:">=1" help:"at most this many held-out conversations"`
	CacheHidden  bool    `yaml:"cache-hidden" help:"keep target hidden states in memory after first use (small data sets)"`
}

func defaultTrainConfig() trainConfig {
	c := trainConfig{Config: train.DefaultConfig(), Device: "cpu", Rank: -1, WorldSize: -1}
	c.EvalEvery = 100
	c.Drafter = drafterOptions{Layers: 1, BlockSize: 16, MaskTokenID: -1, Anchors: 512, Export: "BF16"}
	c.Data = dataOptions{Options: data.DefaultOptions(), BatchSize: 4, EvalFraction: 0.05, EvalMax: 256}
	return c
}

func init() {
	register(&command{
		name:    "train",
		summary: "train a DFlash drafter for a target model on conversations",
		run:     runTrain,
	})
}

// trainArgs is a parsed `dflash train` command line.
type trainArgs struct {
	target, data string
	cfg          trainConfig
	opts         *train.Options
	launch       rendezvous.Launch
}

// trainFlags returns the flag set of `dflash train`, bound to a.
func trainFlags(a *trainArgs) (*flag.FlagSet, *string) {
	fs := newFlagSet("train", "train --target DIR --data DIR|FILE --out DIR [--config FILE.yaml] [flags]")
	fs.StringVar(&a.target, "target", "", "target model `DIR` (HF: config.json, safetensors, tokenizer.json, tokenizer_config.json)")
	fs.StringVar(&a.data, "data", "", "conversations: a JSONL `FILE` (.jsonl, .gz, .zst), a DIR of them, or a data prep DIR")
	configPath := fs.String("config", "", "YAML `FILE` of options, keyed by the flag names (docs/CONFIG.md); flags override it")
	a.cfg = defaultTrainConfig()
	a.opts = train.BindOptions(fs, &a.cfg)
	return fs, configPath
}

// parseTrain reads the flags and the config file and checks every option; nothing
// is written.
func parseTrain(args []string) (*trainArgs, error) {
	a := &trainArgs{}
	fs, configPath := trainFlags(a)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (every option is a --flag)", fs.Arg(0))
	}
	if *configPath != "" {
		if err := a.opts.LoadYAML(*configPath); err != nil {
			return nil, err
		}
	}
	a.opts.Apply()
	if a.target == "" || a.data == "" {
		return nil, fmt.Errorf("--target and --data are required (see dflash train --help)")
	}
	if err := a.opts.Validate(); err != nil {
		return nil, err
	}
	if a.cfg.Out == "" {
		return nil, fmt.Errorf("--out is empty: an output directory is required")
	}
	var err error
	a.launch, err = rendezvous.ParseLaunch(a.launchFlags(), os.Getenv)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// launchFlags returns the launch options as given, named where they were
// given (a flag, or a line of the config file).
func (a *trainArgs) launchFlags() rendezvous.LaunchFlags {
	return rendezvous.LaunchFlags{Rank: a.cfg.Rank, WorldSize: a.cfg.WorldSize, Addr: a.cfg.Rendezvous,
		RankName: a.opts.Source("rank"), WorldSizeName: a.opts.Source("world-size"), AddrName: a.opts.Source("rendezvous")}
}

func runTrain(args []string) error {
	a, err := parseTrain(args)
	if err != nil {
		return err
	}
	// Rank 0 alone writes the output directory; the other processes of a
	// job (which may share it) read the checkpoint they resume from.
	if a.launch.Rank == 0 {
		lock, err := dirlock.Acquire(a.cfg.Out, "dflash train")
		if err != nil {
			return err
		}
		defer lock.Release()
	}
	ctx, caught, stop := signalContext()
	defer stop()
	res, err := trainDrafter(ctx, a)
	if sig := caught(); sig != nil {
		return interrupted(sig, res, args)
	}
	return err
}

// interrupted is the error of a run stopped by signal sig: it names the checkpoint
// and the command that resumes, and carries the exit status 128+sig.
func interrupted(sig os.Signal, res *train.Result, args []string) error {
	name := signalName(sig)
	if res == nil || res.Checkpoint == "" {
		return &exitError{code: signalStatus(sig), err: fmt.Errorf("interrupted by %s before a step was done; nothing to resume", name)}
	}
	if !slices.Contains(args, "--resume") && !slices.Contains(args, "-resume") {
		args = append(slices.Clone(args), "--resume")
	}
	return &exitError{code: signalStatus(sig), err: fmt.Errorf("interrupted by %s after step %d: checkpoint %s\nresume with: dflash train %s",
		name, res.Steps, res.Checkpoint, shellQuote(args))}
}

// placement returns the ranks this process trains (one per GPU of --gpus,
// or this process's rank of a multi-process job), refusing several ranks
// anywhere but on CUDA.
func (a *trainArgs) placement() (traincuda.Placement, error) {
	if a.cfg.Device != "cuda" {
		if a.cfg.GPUs != "" {
			return traincuda.Placement{}, fmt.Errorf("%s %q needs --device cuda", a.opts.Source("gpus"), a.cfg.GPUs)
		}
		if a.launch.WorldSize > 1 {
			return traincuda.Placement{}, fmt.Errorf("world size %d with --device %s: a job of several ranks trains on GPUs (--device cuda, NCCL)", a.launch.WorldSize, a.cfg.Device)
		}
		return traincuda.Placement{Ranks: []int{0}, World: 1}, nil
	}
	gpus, err := gpu.ParseOrdinals(a.opts.Source("gpus"), a.cfg.GPUs, gpu.Count)
	if err != nil {
		return traincuda.Placement{}, err
	}
	return traincuda.PlaceRanks(gpus, a.launch, a.opts.Source("gpus"))
}

func trainDrafter(ctx context.Context, a *trainArgs) (*train.Result, error) {
	cfg, targetDir, dataArg := a.cfg, a.target, a.data
	place, err := a.placement()
	if err != nil {
		return nil, err
	}
	if place.World > 1 && cfg.Data.Buckets > 0 {
		return nil, fmt.Errorf("%s %d with %d ranks: not yet (the bucket sampler is not sharded across ranks); set it to 0", a.opts.Source("data.buckets"), cfg.Data.Buckets, place.World)
	}
	// The target's shape is all that is needed before training; its weights
	// are loaded onto each rank's backend when it starts (load, below).
	tc, err := model.ReadConfig(filepath.Join(targetDir, "config.json"))
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.LoadDir(targetDir)
	if err != nil {
		return nil, err
	}
	tmpl, err := chat.Load(targetDir, tok)
	if err != nil {
		return nil, err
	}
	mask, err := maskToken(cfg.Drafter.MaskTokenID, tok, tc.VocabSize)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.opts.Source("drafter.mask-token-id"), err)
	}
	for _, l := range cfg.Drafter.Taps {
		if l >= tc.NumLayers {
			return nil, fmt.Errorf("%s %v: layer %d is past the target's %d layers (0..%d)", a.opts.Source("drafter.taps"),
				cfg.Drafter.Taps, l, tc.NumLayers, tc.NumLayers-1)
		}
	}
	examples, err := readConversations(ctx, dataArg, cfg, data.Target{Tokenizer: tok, Template: tmpl, Vocab: tc.VocabSize}, cfg.Workers)
	if err != nil {
		return nil, err
	}
	if len(examples) < 2 {
		return nil, fmt.Errorf("%s: %d usable conversations, need at least 2", dataArg, len(examples))
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, train.StreamData))
	rng.Shuffle(len(examples), func(i, j int) { examples[i], examples[j] = examples[j], examples[i] })
	nEval := min(cfg.Data.EvalMax, max(1, int(float64(len(examples))*cfg.Data.EvalFraction)))

	dc := dflash.DrafterConfigFor(&model.Model{Config: *tc}, cfg.Drafter.Layers, cfg.Drafter.Taps, cfg.Drafter.BlockSize, mask)
	if cfg.Drafter.Gamma != 0 {
		dc.Gamma = cfg.Drafter.Gamma
	}
	if cfg.Drafter.Intermediate > 0 {
		dc.IntermediateSize = cfg.Drafter.Intermediate
	}
	dc.NumAnchors = cfg.Drafter.Anchors
	if err := dc.Validate(); err != nil {
		return nil, fmt.Errorf("drafter config: %w", err)
	}
	id, err := runIdentity(targetDir, dataArg, dc, tok, len(examples)-nEval, nEval, cfg.Data.Buckets)
	if err != nil {
		return nil, err
	}
	pad := int32(0)
	if id, ok := tok.TokenID("<|endoftext|>"); ok {
		pad = id
	}
	// Every rank trains its own replica of the drafter, made from the same
	// seed, so that all start from the same weights.
	newSession := func() *dflash.Session {
		d := dflash.New[float32](dc, rand.New(rand.NewPCG(cfg.Seed, train.StreamInit)))
		return &dflash.Session{Drafter: d, Train: examples[nEval:], Eval: examples[:nEval], BatchSize: cfg.Data.BatchSize, Pad: pad,
			Seed: cfg.Seed, CacheHidden: cfg.Data.CacheHidden, Buckets: cfg.Data.Buckets,
			StepFLOPs: func(b *dflash.Batch, bl *dflash.Blocks) float64 {
				return dflash.StepFLOPs(tc, dc, b.Rows, b.Len, bl).Total()
			}}
	}
	lead := newSession() // the session of this process's first rank, whose drafter is exported
	drafter := lead.Drafter
	slog.Info("drafter", "layers", dc.NumLayers, "taps", dc.TargetLayerIDs, "block", dc.BlockSize, "mask", dc.MaskTokenID,
		"gamma", dc.Gamma, "train", len(lead.Train), "eval", len(lead.Eval), "device", cfg.Device, "ranks", place.World)
	if err := logBuckets(lead); err != nil {
		return nil, fmt.Errorf("%s: %w", a.opts.Source("data.buckets"), err)
	}
	// run trains m on backend b, the models placed there (dev: the
	// drafter's train.Device, nil on the CPU; coll: the rank's collective,
	// nil for one rank).
	run := func(m rankModels, b tensor.Backend[float32], dev train.Device, coll train.Collective) (*train.Result, error) {
		sess := m.sess
		sess.Backend, sess.Device, sess.Collective = b, dev, coll
		sess.Head, sess.Hidden = dflash.HeadOf(m.target), dflash.TargetHidden(m.target, dc.TargetLayerIDs, b)
		if cfg.SpecEvalEvery > 0 {
			if sess.SpecEval, err = spec.EvalFunc(b, m.target, sess.Drafter, sess.Eval, cfg.SpecPrompts, cfg.SpecMaxNewTokens); err != nil {
				return nil, err
			}
		}
		hooks := sess.Hooks()
		peak, source := recipe.MFUPeak(cfg.PeakTFLOPS, m.gpu, cfg.Workers)
		if m.sess == lead {
			slog.Info("mfu peak", "mfu_peak_tflops", peak, "mfu_peak_source", source)
		}
		hooks.Identity, hooks.PeakTFLOPS, hooks.Gauges = id, peak, m.gauges
		return train.Run(ctx, cfg.Config, hooks)
	}
	// load returns what a rank trains on backend b: the target loaded there
	// (on a GPU straight into device memory, a tensor at a time) and, for
	// this process's first rank, the lead session, else a new replica.
	load := func(b tensor.Backend[float32], first bool) (rankModels, error) {
		t, err := model.LoadOn(targetDir, b)
		s := lead
		if !first {
			s = newSession()
		}
		return rankModels{target: t, sess: s}, err
	}
	var res *train.Result
	if cfg.Device == "cuda" {
		res, err = trainOnGPU(ctx, cfg, place, load, run)
	} else {
		cpu := tensor.NewCPU[float32](cfg.Workers)
		var m rankModels
		if m, err = load(cpu, true); err == nil {
			res, err = run(m, cpu, nil, nil)
		}
	}
	if err != nil || !place.Lead() {
		return res, err
	}
	steps, replays := lead.BucketSteps(), lead.Replays()
	for _, l := range slices.Sorted(maps.Keys(steps)) {
		r := replays[l]
		slog.Info("bucket steps", "len", l, "steps", steps[l], "graph_captured", r["captured"], "graph_launched", r["launched"],
			"graph_recaptured", r["recaptured"], "eager", r["eager"], "ungraphed", r["ungraphed"])
	}
	out := filepath.Join(cfg.Out, "drafter")
	if err := drafter.WriteDir(out, cfg.Drafter.Export); err != nil {
		return nil, err
	}
	fmt.Printf("trained %d steps (%d tokens) in %s; drafter written to %s\n", res.Steps, res.Tokens, res.Elapsed.Round(1e9), out)
	for _, k := range slices.Sorted(maps.Keys(res.LastEval)) {
		fmt.Printf("  eval %-8s %.4f\n", k, res.LastEval[k])
	}
	return res, nil
}

// rankModels is what one rank trains: its replica of the target and its
// session (which holds its replica of the drafter), and optionally the
// readings of its device after each step (train.Hooks.Gauges).
type rankModels struct {
	target *model.Model
	sess   *dflash.Session
	gauges func() map[string]float64
	gpu    *gpu.Device // the rank's GPU (nil on the CPU): its MFU peak
}

// logBuckets logs the length buckets of the training batches, each with its
// shape and padded fraction, and the padded fraction of an epoch.
func logBuckets(sess *dflash.Session) error {
	r, err := sess.BucketReport()
	if err != nil || r == nil {
		return err
	}
	for _, b := range r.Buckets {
		slog.Info("bucket", "len", b.Len, "rows", b.Rows, "samples", b.Samples, "batches", b.Batches,
			"padded", b.Padded, "pad_frac", fmt.Sprintf("%.3f", b.Waste))
	}
	slog.Info("buckets", "n", len(r.Buckets), "batches", r.Batches, "tokens", r.Tokens, "padded", r.Padded,
		"pad_frac", fmt.Sprintf("%.3f", r.Waste), "pad_frac_all_longest", fmt.Sprintf("%.3f", r.WasteUnbucketed))
	return nil
}

// maskToken chooses the mask token: id when >= 0, else the tokenizer's
// <|MASK|>, else the first id past the tokenizer's vocabulary when the
// target's embedding has that row (as adding a special token does).
func maskToken(id int, tok *tokenizer.Tokenizer, vocab int) (int, error) {
	if id >= 0 {
		if id >= vocab {
			return 0, fmt.Errorf("id %d is outside the target's vocabulary [0, %d)", id, vocab)
		}
		return id, nil
	}
	if t, ok := tok.TokenID("<|MASK|>"); ok {
		return int(t), nil
	}
	if n := tok.VocabSize(); n < vocab {
		return n, nil
	}
	return 0, fmt.Errorf("the tokenizer has no <|MASK|> token and the embedding no spare row: set --drafter.mask-token-id")
}

// readConversations reads the training samples (data.Load: a prepared
// directory or JSONL, every id checked against the target) as examples.
func readConversations(ctx context.Context, arg string, cfg trainConfig, t data.Target, workers int) ([]dflash.Example, error) {
	opts := cfg.Data.Options
	opts.BlockSize = cfg.Drafter.BlockSize
	samples, sum, err := data.Load(ctx, arg, opts, t, workers)
	if err != nil {
		return nil, err
	}
	slog.Info("data", "input", arg, "read", sum.Lines, "kept", sum.Kept, "truncated", sum.Truncated,
		"bad_lines", sum.BadFiles, "dropped", sum.Dropped)
	out := make([]dflash.Example, len(samples))
	for i, s := range samples {
		out[i] = dflash.Example{IDs: s.IDs, Mask: s.Mask}
	}
	return out, nil
}
