// Package recipe is the DFlash drafter training job as a library call:
// Run(ctx, Spec) reads the target's shape, tokenizer and chat template,
// chooses the mask token, the taps and the pad token, reads the
// conversations and holds out the evaluation split, builds the drafter's
// config and the run's identity, places the ranks (one on the CPU, one per
// GPU on CUDA), runs train.Run on each through a dflash.Session over the
// target loaded on the rank's backend, and exports the drafter. It logs
// with log/slog and prints nothing; `dflash train` parses the flags into a
// Spec and prints the Result.
//
// The pieces of the recipe that other callers share are exported:
// DrafterConfig, MaskToken, PadToken, Split, Hooks and MFUPeak (the demo's
// drafter stage uses them and `dflash bench step` MFUPeak, each saying
// where it chooses differently). The step benchmark, recipe/stepbench,
// times one step of this recipe; the pieces it shares with the model live
// in model/dflash (DrafterConfigFor, DefaultTaps, CheckTaps, StepFLOPs), gpu
// and internal/cpufeat (the peaks), so that model/ does not depend on the
// trainer.
package recipe
