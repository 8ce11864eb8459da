package recipe

import (
	"dflash/data"
	"dflash/rendezvous"
	"dflash/train"
)

// Spec is one training job: the target, the data, the options, and this
// process's place in a job of several processes. `dflash train` fills it
// from its flags and config file.
type Spec struct {
	// TargetDir is the target model's directory (HF: config.json,
	// safetensors, tokenizer.json, tokenizer_config.json).
	TargetDir string
	// DataPaths are the conversations, read in order: JSONL files (.jsonl,
	// .gz, .zst), directories of them, or `data prep` directories.
	DataPaths []string
	Options
	// Launch is this process's rank, world size and rendezvous address
	// (rendezvous.ParseLaunch of Rank, WorldSize and Rendezvous with the
	// environment).
	Launch rendezvous.Launch
	// Source names an option as the user gave it, for errors
	// (train.Options.Source: "--gpus", "FILE line N: gpus"); nil: "--name".
	Source func(name string) string
}

// source names option name as the user gave it.
func (s *Spec) source(name string) string {
	if s.Source == nil {
		return "--" + name
	}
	return s.Source(name)
}

// Options are the options of a training job: every field is both a flag
// (--drafter.block-size) and a YAML key (block-size under drafter:) of
// `dflash train` (train.BindOptions); docs/CONFIG.md is their table,
// generated from these tags (go test ./cmd/dflash -run TestConfigDoc -update).
type Options struct {
	Workers       int     `yaml:"workers" range:">=0" help:"CPU goroutines (0: all cores)"`
	Device        string  `yaml:"device" choice:"cpu,cuda" help:"where the target and the drafter run: cpu, or cuda (the GPUs of --gpus, bf16 activations, fp32 master weights and optimizer)"`
	Deterministic bool    `yaml:"deterministic" help:"cuda: bit-identical runs and resumes (the deterministic attention backward, no atomic GEMM reductions; slower); the CPU always is"`
	PeakTFLOPS    float64 `yaml:"peak-tflops" range:">=0" help:"peak TFLOP/s of a rank's device that the mfu metric divides by (0: derived from the device: a GPU's architecture, SMs and clock, the CPU's cores, clock and FLOP/cycle; the log names the source)"`
	TargetDType   string  `yaml:"target-dtype" choice:"bf16,fp8" help:"cuda: the frozen target's products: bf16, or fp8 (E4M3 weights with a scale per output channel, activations with a scale per token, fp32 accumulation, fast by default; the tapped hidden states differ from bf16's by 5-7% on the GPU demo's trained target, drafters trained on them accept as bf16's do, docs/FP8.md; spec evaluations are off, the FP8 target not being the one that serves)"`
	GPUs          string  `yaml:"gpus" help:"with --device cuda, the GPUs this process trains on, one data-parallel rank each (NCCL): ordinals 0,1,... or all (empty: GPU 0; a job of several processes takes each process's LOCAL_RANK)"`
	// Rank, WorldSize and Rendezvous are read, with the environment, into
	// Spec.Launch by the caller.
	Rank         int    `yaml:"rank" range:">=-1" help:"this process's rank in a data-parallel job (-1: RANK from the environment, else 0)"`
	WorldSize    int    `yaml:"world-size" range:">=-1" help:"ranks in a data-parallel job, one per GPU (-1: WORLD_SIZE from the environment, else 1)"`
	Rendezvous   string `yaml:"rendezvous" help:"host:port where rank 0 hands out the NCCL id (empty: MASTER_ADDR and MASTER_PORT from the environment)"`
	train.Config `yaml:",inline"`
	SpecDecode   `yaml:",inline"`
	Drafter      DrafterOptions `yaml:"drafter"`
	Data         DataOptions    `yaml:"data"`
}

// SpecDecode is what the spec evaluations during training decode
// (train.Config.SpecEvalEvery schedules them).
type SpecDecode struct {
	SpecPrompts      int `yaml:"spec-prompts" range:">=1" help:"held-out prompts decoded by each spec evaluation"`
	SpecMaxNewTokens int `yaml:"spec-max-new-tokens" range:">=1" help:"tokens generated per prompt by each spec evaluation"`
}

// DrafterOptions shape the drafter (DrafterConfig).
type DrafterOptions struct {
	Layers       int     `yaml:"layers" range:">=1" help:"drafter decoder layers"`
	Taps         []int   `yaml:"taps" range:">=0" help:"target layers to tap, 0-based (empty: spread evenly from 1 to L-3, one per drafter layer)"`
	BlockSize    int     `yaml:"block-size" range:">=2" help:"draft block size B"`
	MaskTokenID  int     `yaml:"mask-token-id" range:">=-1" help:"mask token id (-1: the tokenizer's <|MASK|>, else the first id past the tokenizer's vocabulary)"`
	Gamma        float64 `yaml:"gamma" range:">=0" help:"loss decay gamma (0: the default for the block size)"`
	Anchors      int     `yaml:"anchors" range:">=1" help:"anchors sampled per sequence and step"`
	Intermediate int     `yaml:"intermediate-size" range:">=0" help:"drafter MLP width (0: the target's)"`
	Export       string  `yaml:"export" choice:"F32,BF16" help:"dtype of the exported drafter in OUT/drafter"`
}

// DataOptions holds data.Options, the sample rules `data prep` shares (its
// BlockSize is the drafter's), and how training batches and holds out.
type DataOptions struct {
	data.Options `yaml:",inline"`
	BatchSize    int     `yaml:"batch-size" range:">=1" help:"rows per micro-batch: packed rows (several conversations each), or with pack false one conversation each"`
	Pack         bool    `yaml:"pack" help:"pack several conversations into each row of pack-len tokens, attention kept inside each: every step one shape, almost no padding (false: a conversation a row, padded to the batch's longest, or to its bucket's with buckets)"`
	PackLen      int     `yaml:"pack-len" range:">=0" help:"tokens per packed row (0: the longest conversation, rounded up to 128)"`
	Buckets      int     `yaml:"buckets" range:">=0" help:"with pack false: group training batches into at most N length buckets chosen to pad least, each batch of a bucket one shape: batch-size rows, the bucket's length, min(anchors, length-1) anchor blocks (0: batches in data order, padded to their longest)"`
	EvalFraction float64 `yaml:"eval-fraction" range:"[0,1)" help:"fraction of conversations held out for evaluation (at least one is)"`
	EvalMax      int     `yaml:"eval-max" range:">=1" help:"at most this many held-out conversations"`
	EvalAnchors  int     `yaml:"eval-anchors" range:">=1" help:"anchors per held-out conversation in an evaluation (at most drafter.anchors)"`
	CacheHidden  bool    `yaml:"cache-hidden" help:"keep target hidden states in memory after first use (small data sets)"`
}

// GPUSpecEvalEvery is --spec-eval-every's default with --device cuda (its
// value −1 there): the spec evaluation decodes SpecPrompts held-out prompts
// of SpecMaxNewTokens tokens on the training GPU every 500 steps and at the
// end. At the Qwen3-8B shape (docs/PERF.md: 0.76 s a step) 500 steps are
// 380 s; the default 8 prompts of 64 tokens at an acceptance length of 3
// are about 170 rounds of a verification of 16 and a proposal (estimated
// at 10 ms a round, the target's 16.4 GB read once: 3.4 ms at the HBM's
// rate, plus the drafter and the launches) and 8 prefills: about 2 s, 0.5%
// of the run, under the 2% an evaluation may cost (the log's "eval @ N"
// line gives each evaluation's seconds, the records' time_eval_s their
// sum). On the CPU, where a large target decodes a few tokens a minute,
// the default is never.
const GPUSpecEvalEvery = 500

// specEvalEvery resolves --spec-eval-every −1, the device's default
// (GPUSpecEvalEvery on cuda, never on the cpu or with an FP8 target).
func specEvalEvery(every int, device string, fp8 bool) int {
	switch {
	case every >= 0:
		return every
	case device == "cuda" && !fp8:
		return GPUSpecEvalEvery
	}
	return 0
}

// DefaultOptions returns the defaults of `dflash train`.
func DefaultOptions() Options {
	o := Options{Config: train.DefaultConfig(), Device: "cpu", TargetDType: "bf16", Rank: -1, WorldSize: -1,
		SpecDecode: SpecDecode{SpecPrompts: 8, SpecMaxNewTokens: 64}}
	o.EvalEvery = 100
	o.SpecEvalEvery = -1
	o.Drafter = DrafterOptions{Layers: 1, BlockSize: 16, MaskTokenID: -1, Anchors: 512, Export: "BF16"}
	o.Data = DataOptions{Options: data.DefaultOptions(), BatchSize: 4, Pack: true, EvalFraction: 0.05, EvalMax: 64, EvalAnchors: 64}
	return o
}
