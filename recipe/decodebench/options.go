// Package decodebench times the three passes of speculative decoding with
// a DFlash drafter (package spec) for a named target shape with random
// weights, each against its HBM bound: a plain decode step (one token with
// a KV cache, model.Prefill), a verification of a block (the target over B
// tokens as spec verifies them, model.Decode), each reading back its rows'
// argmax ids as greedy decoding does, and
// a drafter proposal of a block (spec.DFlash's Propose). `dflash bench
// decode` parses its flags into Options, calls Run (the CPU, or a dry run)
// or RunOn (a device the caller opened) and prints the Report.
//
// Every pass starts from a cache of Context positions (a prompt of random
// ids prefilled once, the drafter's context extended with its hidden
// states) and the cache is truncated back after each repetition, so every
// repetition sees the same length. A pass's bytes are those it must read
// from memory at least: the weights it reads whole (the parameters' count
// times their element size on the device; the embedding, of which a pass
// gathers only rows, excluded; the LM head included) and the keys and
// values of the positions it attends to. Its bound is bytes / the peak
// memory bandwidth.
//
// The implied speedup of speculative decoding at an acceptance length tau
// (tokens per verification) is the time plain decoding takes for tau
// tokens over the time of one round, a proposal and a verification:
//
//	speedup(tau) = tau · t_decode / (t_propose + t_verify)
//
// reported at the measured medians and at the bounds. It leaves out what
// a round does besides (the drafter's Extend with the accepted positions,
// the acceptance rule on the host).
package decodebench

import (
	"fmt"
	"strings"

	"dflash/model"
	"dflash/model/dflash"
	"dflash/recipe/stepbench"
)

// Defaults of Options, as `dflash bench decode` gives them.
const (
	// DefaultContext is the positions already in the cache when a pass runs.
	DefaultContext = 1024
	// DefaultBlockSize is the tokens of a verified or proposed block.
	DefaultBlockSize = 16
	// DefaultDrafterLayers is the drafter of issue 27's measurement: five
	// layers, as the published DFlash drafter of Qwen3-8B.
	DefaultDrafterLayers = 5
)

// Options describes one benchmark.
type Options struct {
	Device     string       // cpu or cuda
	TargetName string       // the name of Target in the report (a --target name)
	Target     model.Config // the target's shape; its weights are random

	Context       int // positions in the cache before each pass (a prompt prefilled once)
	BlockSize     int // tokens of a verified and of a proposed block
	DrafterLayers int // the drafter's layers (taps: dflash.DefaultTaps)

	Reps, Warmup int    // timed repetitions of each pass, untimed ones before them
	Seed         uint64 // weights and token ids
	// HBMPeak is the peak memory bandwidth the bounds divide by, in
	// bytes/s; 0 means the device's (Env.HBMPeak).
	HBMPeak float64
	// DryRun allocates no model and times nothing: the report holds the
	// byte counts and the bounds.
	DryRun bool
	// Profile runs each pass once more with every op timed by the backend
	// (a tensor.Profiler: the CUDA backend; the ops then run without
	// graphs), one phase per pass, into Report.Ops.
	Profile bool
}

// Target returns the shape of the named target (stepbench's names:
// TargetNames), the error naming --target.
func Target(name string) (model.Config, error) {
	c, err := stepbench.Target(name)
	if err != nil {
		return c, fmt.Errorf("--target %q: unknown (want one of %s)", name, strings.Join(TargetNames(), ", "))
	}
	return c, nil
}

// TargetNames returns the names Target knows, sorted.
func TargetNames() []string { return stepbench.TargetNames() }

// normalized checks every field, naming the flag of a bad one.
func (o Options) normalized() (Options, error) {
	if o.Device != "cpu" && o.Device != "cuda" {
		return o, fmt.Errorf("--device %q: unknown device (cpu or cuda)", o.Device)
	}
	if o.TargetName == "" {
		o.TargetName = "custom"
	}
	if err := o.Target.Validate(); err != nil {
		return o, fmt.Errorf("--target %s: %w", o.TargetName, err)
	}
	for _, f := range []struct {
		flag string
		v    int
		min  int
	}{{"context", o.Context, 1}, {"block-size", o.BlockSize, 2}, {"drafter-layers", o.DrafterLayers, 1},
		{"reps", o.Reps, 1}, {"warmup", o.Warmup, 0}} {
		if f.v < f.min {
			return o, fmt.Errorf("--%s %d: must be >= %d", f.flag, f.v, f.min)
		}
	}
	if limit := o.Target.ContextLimit(); o.Context+o.BlockSize > limit {
		return o, fmt.Errorf("--context %d: with a block of %d it passes the target's %d positions (max_position_embeddings)", o.Context, o.BlockSize, limit)
	}
	if !(o.HBMPeak >= 0) {
		return o, fmt.Errorf("--hbm-peak %v: must be >= 0 (0: the device's)", o.HBMPeak)
	}
	return o, nil
}

// Validate checks every option, naming the flag of a bad one, and the
// drafter they make.
func (o Options) Validate() error {
	o, err := o.normalized()
	if err != nil {
		return err
	}
	if err := drafterConfig(o).Validate(); err != nil {
		return fmt.Errorf("drafter: %w", err)
	}
	return nil
}

// drafterConfig returns the drafter of o: the target's attention shape,
// o.DrafterLayers layers at the default taps (dflash.DrafterConfigFor), the
// mask token the last id of the vocabulary (the benchmark has no
// tokenizer; as stepbench's).
func drafterConfig(o Options) *dflash.Config {
	return dflash.DrafterConfigFor(&model.Model{Config: o.Target}, o.DrafterLayers, nil, o.BlockSize, o.Target.VocabSize-1)
}
