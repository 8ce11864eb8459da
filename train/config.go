package train

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// Config is the trainer's configuration. Field tags give the YAML key (flags use the
// same name with '-' for '_') and the flag help.
type Config struct {
	Out             string  `yaml:"out" help:"output directory: checkpoints, metrics.jsonl, plot.png"`
	Steps           int     `yaml:"steps" help:"optimizer steps in the whole run"`
	LR              float64 `yaml:"lr" help:"peak learning rate"`
	MinLRRatio      float64 `yaml:"min_lr_ratio" help:"final learning rate as a fraction of lr (cosine decay)"`
	WarmupSteps     int     `yaml:"warmup_steps" help:"linear warmup steps"`
	WeightDecay     float64 `yaml:"weight_decay" help:"AdamW decoupled weight decay (not applied to norms and biases)"`
	Beta1           float64 `yaml:"beta1" help:"AdamW beta1"`
	Beta2           float64 `yaml:"beta2" help:"AdamW beta2"`
	Eps             float64 `yaml:"eps" help:"AdamW epsilon"`
	GradClip        float64 `yaml:"grad_clip" help:"clip the global gradient norm to this (0: no clipping)"`
	GradAccum       int     `yaml:"grad_accum" help:"micro-batches per optimizer step"`
	Seed            uint64  `yaml:"seed" help:"seed of every random stream"`
	EvalEvery       int     `yaml:"eval_every" help:"evaluate every N steps and at the end (0: only at the end)"`
	SaveEvery       int     `yaml:"save_every" help:"checkpoint every N steps and at the end (0: only at the end)"`
	KeepCheckpoints int     `yaml:"keep_checkpoints" help:"checkpoints kept (0: all)"`
	Resume          bool    `yaml:"resume" help:"continue from the newest checkpoint in out"`
	StopAt          int     `yaml:"stop_at" help:"stop (with a checkpoint) after this step; the schedule still spans steps (0: run to the end)"`
	LogEvery        int     `yaml:"log_every" help:"progress line every N steps when stderr is not a terminal (0: every 5 s)"`
	Progress        string  `yaml:"progress" help:"progress display: auto, bar, lines or off"`
	Plot            bool    `yaml:"plot" help:"write plot.png at the end"`
	SpecEval        `yaml:",inline"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Out: "out", Steps: 1000, LR: 6e-4, MinLRRatio: 0.1, WarmupSteps: 50,
		WeightDecay: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, GradClip: 1.0, GradAccum: 1,
		Seed: 0, EvalEvery: 0, SaveEvery: 200, KeepCheckpoints: 3, Progress: "auto", Plot: true,
		SpecEval: DefaultSpecEval(),
	}
}

// Validate checks every field and names the first bad one.
func (c *Config) Validate() error {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("config: %s = %v: %s", field, v, why)
	}
	switch {
	case c.Out == "":
		return bad("out", `""`, "an output directory is required")
	case c.Steps <= 0:
		return bad("steps", c.Steps, "must be positive")
	case !(c.LR > 0):
		return bad("lr", c.LR, "must be positive")
	case c.MinLRRatio < 0 || c.MinLRRatio > 1:
		return bad("min_lr_ratio", c.MinLRRatio, "must be in [0, 1]")
	case c.WarmupSteps < 0:
		return bad("warmup_steps", c.WarmupSteps, "must not be negative")
	case c.WeightDecay < 0:
		return bad("weight_decay", c.WeightDecay, "must not be negative")
	case c.Beta1 < 0 || c.Beta1 >= 1:
		return bad("beta1", c.Beta1, "must be in [0, 1)")
	case c.Beta2 < 0 || c.Beta2 >= 1:
		return bad("beta2", c.Beta2, "must be in [0, 1)")
	case !(c.Eps > 0):
		return bad("eps", c.Eps, "must be positive")
	case c.GradClip < 0:
		return bad("grad_clip", c.GradClip, "must not be negative")
	case c.GradAccum < 1:
		return bad("grad_accum", c.GradAccum, "must be at least 1")
	case c.EvalEvery < 0:
		return bad("eval_every", c.EvalEvery, "must not be negative")
	case c.SaveEvery < 0:
		return bad("save_every", c.SaveEvery, "must not be negative")
	case c.KeepCheckpoints < 0:
		return bad("keep_checkpoints", c.KeepCheckpoints, "must not be negative")
	case c.StopAt < 0:
		return bad("stop_at", c.StopAt, "must not be negative")
	case c.LogEvery < 0:
		return bad("log_every", c.LogEvery, "must not be negative")
	}
	if err := c.SpecEval.validate(); err != nil {
		return err
	}
	switch c.Progress {
	case "auto", "bar", "lines", "off":
	default:
		return bad("progress", c.Progress, "must be auto, bar, lines or off")
	}
	return nil
}

// LoadYAML decodes the YAML file at path into v (a pointer to a struct that already
// holds defaults; keys absent from the file keep them). Unknown keys are errors that
// name the file, line and key; an empty file changes nothing.
func LoadYAML(path string, v any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return DecodeYAML(path, raw, v)
}

// DecodeYAML is LoadYAML on bytes; name labels errors.
func DecodeYAML(name string, raw []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		var te *yaml.TypeError
		if errors.As(err, &te) {
			// One line per fault, each "line N: ...", naming the key or value.
			return fmt.Errorf("%s: %s", name, strings.Join(te.Errors, "; "))
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: more than one YAML document", name)
	}
	return nil
}
