package train

import (
	"fmt"

	"dflash/tensor"
)

// Config is the trainer's configuration. Field tags give the option name (the flag
// --name and the YAML key name are the same), its help and the values it takes (see
// Options).
type Config struct {
	Out             string  `yaml:"out" help:"output directory: checkpoints, metrics.jsonl, TensorBoard event files, plot.png"`
	Steps           int     `yaml:"steps" range:">=1" help:"optimizer steps in the whole run"`
	LR              float64 `yaml:"lr" range:">0" help:"peak learning rate"`
	MinLRRatio      float64 `yaml:"min-lr-ratio" range:"[0,1]" help:"final learning rate as a fraction of lr (cosine decay)"`
	WarmupSteps     int     `yaml:"warmup-steps" range:">=0" help:"linear warmup steps"`
	WeightDecay     float64 `yaml:"weight-decay" range:">=0" help:"AdamW decoupled weight decay (not applied to norms and biases)"`
	Beta1           float64 `yaml:"beta1" range:"[0,1)" help:"AdamW beta1"`
	Beta2           float64 `yaml:"beta2" range:"[0,1)" help:"AdamW beta2"`
	Eps             float64 `yaml:"eps" range:">0" help:"AdamW epsilon"`
	GradClip        float64 `yaml:"grad-clip" range:">=0" help:"clip the global gradient norm to this (0: no clipping)"`
	GradAccum       int     `yaml:"grad-accum" range:">=1" help:"micro-batches per optimizer step"`
	Seed            uint64  `yaml:"seed" range:">=0" help:"seed of every random stream"`
	EvalEvery       int     `yaml:"eval-every" range:">=0" help:"evaluate every N steps and at the end (0: only at the end)"`
	SaveEvery       int     `yaml:"save-every" range:">=0" help:"checkpoint every N steps and at the end (0: only at the end)"`
	KeepCheckpoints int     `yaml:"keep-checkpoints" range:">=0" help:"checkpoints kept (0: all)"`
	Resume          bool    `yaml:"resume" help:"continue from the newest checkpoint in out (an error when there is none)"`
	ResumeAnyway    bool    `yaml:"resume-anyway" help:"with resume: continue even when the run's identity (shapes, taps, data, tokenizer) differs from the checkpoint's"`
	StopAt          int     `yaml:"stop-at" range:">=0" help:"stop (with a checkpoint) after this step; the schedule still spans steps (0: run to the end)"`
	LogEvery        int     `yaml:"log-every" range:">=0" help:"progress line every N steps when stderr is not a terminal (0: every 5 s)"`
	Progress        string  `yaml:"progress" choice:"auto,bar,lines,off" help:"progress display"`
	Plot            bool    `yaml:"plot" help:"write plot.png at the end"`
	TensorBoard     bool    `yaml:"tensorboard" help:"write the metrics as TensorBoard event files (events.out.tfevents.*) beside metrics.jsonl too: tensorboard --logdir OUT"`
	SpecEval        `yaml:",inline"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Out: "out", Steps: 1000, LR: 6e-4, MinLRRatio: 0.1, WarmupSteps: 50,
		WeightDecay: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, GradClip: 1.0, GradAccum: 1,
		Seed: 0, EvalEvery: 0, SaveEvery: 200, KeepCheckpoints: 3, Progress: "auto", Plot: true, TensorBoard: true,
	}
}

// AdamW returns the optimizer's hyper-parameters: Beta1, Beta2, Eps and
// WeightDecay.
func (c *Config) AdamW() tensor.AdamW {
	return tensor.AdamW{Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay}
}

// Validate checks every field against the range in its tag and names the bad ones.
func (c *Config) Validate() error {
	if c.Out == "" {
		return fmt.Errorf("config: out is empty: an output directory is required")
	}
	if err := checkAll(collect(c, nil)); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
