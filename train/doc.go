// Package train is the model-agnostic trainer: the parameters and AdamW over a
// backend (Params), the learning-rate schedule, gradient clipping and accumulation,
// seeded random streams, evaluation over draft blocks, atomic checkpoints, metrics,
// progress and the training loop.
//
// A model takes part through its parameter arena (tensor.Arena: flat values and
// gradient) on a backend, and the Hooks that Run calls: Step computes one
// micro-batch's loss and adds its gradient into the arena's, Eval evaluates on
// held-out data, and DataState/RestoreData save and restore the data iterator's
// position as opaque JSON. Params keeps AdamW's state beside the arena on the same
// backend and does everything the optimizer does through the backend's methods
// (tensor.Optimizer, Fill, Scale, Download), so one Params serves the CPU and a GPU.
//
// Resuming is exact: Run with Steps=N gives bit-identical parameters to Run stopped
// at N/2 (StopAt) and resumed, provided the hooks are deterministic given the RNG
// they are handed and the data position they restore. Everything random comes from
// RNG streams whose state is saved in each checkpoint.
//
// Data parallel: with Hooks.Collective of R ranks, R Runs (one per GPU or
// goroutine) train one model. Each Step computes its rank's share of the global
// batch; Run sums the flat gradient over the ranks in buckets (PlanBuckets: the last
// parameters first, as a backward pass completes them) and scales it by
// 1/(R*GradAccum), so every rank clips by the global norm and takes the same step,
// bit for bit. Rank 0 alone evaluates and writes; a checkpoint holds the global data
// position and resumes on any number of ranks. LocalGroup is the in-process
// Collective (CPU ranks, tests); a rank that stops taking part fails the others'
// collectives within its timeout with a RankLostError naming it.
//
// Checkpoints do not stop training for their writes: at the step boundary Run copies
// the master values and AdamW's moments into host memory it allocated once
// (Backend.AllocHost: page-locked on a device) and writes the files from that copy in
// the background, one write at a time (the two large files in 64 MiB direct writes,
// around the page cache: atomicfile's WriteBlocks); the end of the run and a stop
// wait for it, and a write that fails fails the run. Result.Time and the run's last log line split
// its wall time into start, steps, evaluation, checkpoint stalls and the final wait.
//
// An output directory holds:
//
//	checkpoint-<step>/      one per saved step, written whole or not at all:
//	    config.json         the caller's model config, verbatim
//	    model.safetensors   the trainable parameters (F32)
//	    optimizer.safetensors  AdamW moments: "<param>.exp_avg", "<param>.exp_avg_sq" (F32)
//	    optimizer.json      AdamW hyper-parameters and per-parameter step counts (all equal)
//	    trainer_state.json  step, tokens, RNG state, data position, schedule, best
//	                        metrics, and the size and CRC-32C of every other file
//	latest                  the name of the newest checkpoint (informational; LoadLatest
//	                        takes the highest valid step)
//	metrics.jsonl           one JSON object per training step and per evaluation
//	plot.png                loss and accuracy curves, written at the end
package train
