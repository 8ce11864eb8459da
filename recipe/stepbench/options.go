// Package stepbench times one DFlash drafter training step, phase by phase,
// for a named target shape with random weights: the input assembly (batch,
// anchors, blocks), the target's forward pass up to the deepest tap (no
// gradients), the drafter's forward pass, its backward pass and the
// optimizer (gradient clipping, AdamW, zeroing the gradients).
// `dflash bench step` parses its flags into Options, calls Run and prints
// the Report.
//
// Phase times are means over the timed steps and add up to the mean step
// time. The report adds tokens/s, samples/s, the peak memory, the step's
// FLOPs (dflash.StepFLOPs, written out in docs/PERF.md) and the MFU against the
// device's peak FLOP rate. Before allocating, Run refuses a shape whose
// estimated memory exceeds what the host has, giving both numbers.
//
// Run is the CPU's. A GPU's is RunOn, with an Env the caller made
// (cmd/dflash: the CUDA tensor backend on GPU 0); the package itself never
// names a device. The report then adds the device's numbers and the first
// step (kernel compilation or cache loads included).
package stepbench

import (
	"fmt"
	"slices"

	"dflash/model"
	"dflash/model/dflash"
)

// Options describes one benchmark.
type Options struct {
	Device     string       // cpu or cuda
	TargetName string       // the name of Target in the report (a --target-config name)
	Target     model.Config // the target's shape; its weights are random

	SeqLen, Batch, Anchors, BlockSize int
	DrafterLayers                     int
	Taps                              []int // 0-based target layers; empty: dflash.DefaultTaps(L, DrafterLayers)

	Steps, Warmup int    // timed steps, untimed steps before them
	Seed          uint64 // weights, token ids and anchors
	// PeakTFLOPS is the peak FLOP rate the MFU divides by; 0 means the
	// device's (Env.Peak).
	PeakTFLOPS float64
	// LossChunk is the number of block slots whose logits exist at once
	// (Drafter.LossChunk; 0: the cross-entropy's default).
	LossChunk int
	// DryRun allocates no model and times nothing: the report holds the
	// shapes, the memory estimate and the FLOPs of one step's anchors.
	DryRun bool
	// DrafterOnly times the drafter's step alone: its hidden states are
	// given (random, made once and kept on the device) instead of computed
	// by the target, of which only the embedding and LM head exist.
	DrafterOnly bool
	// TargetFP8 holds the target's matrices in FP8 (model.LoadOptions.FP8,
	// a device only): its products run in FP8, and the report gives each
	// tap's relative error against the bf16 target on one batch
	// (Report.TapRelErr), measured after the timed steps.
	TargetFP8 bool
	// Profile runs one more step after the timed ones with every op timed
	// on the device (a backend that is a tensor.Profiler): Report.Ops.
	Profile bool
}

// normalized checks every field, naming the flag of a bad one, and fills
// the defaults.
func (o Options) normalized() (Options, error) {
	if o.Device != "cpu" && o.Device != "cuda" {
		return o, fmt.Errorf("--device %q: unknown device (cpu or cuda)", o.Device)
	}
	if o.TargetName == "" {
		o.TargetName = "custom"
	}
	if o.TargetFP8 && (o.Device != "cuda" || o.DrafterOnly) {
		return o, fmt.Errorf("--target-dtype fp8: the FP8 target runs on cuda, and only when the target runs (not with --drafter-only)")
	}
	if err := o.Target.Validate(); err != nil {
		return o, fmt.Errorf("--target-config %s: %w", o.TargetName, err)
	}
	for _, f := range []struct {
		flag string
		v    int
		min  int
	}{{"seq-len", o.SeqLen, 2}, {"batch", o.Batch, 1}, {"anchors", o.Anchors, 1}, {"block-size", o.BlockSize, 2},
		{"drafter-layers", o.DrafterLayers, 1}, {"steps", o.Steps, 1}, {"warmup", o.Warmup, 0}, {"loss-chunk", o.LossChunk, 0}} {
		if f.v < f.min {
			return o, fmt.Errorf("--%s %d: must be >= %d", f.flag, f.v, f.min)
		}
	}
	if cands := candidates(o.SeqLen); o.Anchors > cands {
		return o, fmt.Errorf("--anchors %d: a --seq-len %d sequence has only %d anchor candidates (its last %d tokens are the assistant's)",
			o.Anchors, o.SeqLen, cands, o.SeqLen-promptLen(o.SeqLen))
	}
	if err := dflash.CheckTaps(o.Taps, o.Target.NumLayers); err != nil {
		return o, fmt.Errorf("--taps %v: %w", o.Taps, err)
	}
	o.Taps = slices.Clone(o.Taps)
	if !(o.PeakTFLOPS >= 0) {
		return o, fmt.Errorf("--peak-tflops %v: must be >= 0 (0: the device's)", o.PeakTFLOPS)
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

// Run runs the benchmark o describes on the CPU, or plans it (DryRun) for
// any device.
func Run(o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o, _ = o.normalized()
	if o.DryRun {
		return plan(o), nil
	}
	if o.Device != "cpu" {
		return nil, fmt.Errorf("stepbench.Run: --device %s runs through RunOn with a device the caller opened", o.Device)
	}
	return runCPU(o)
}
