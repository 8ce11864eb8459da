package train

import (
	"log/slog"
	"time"
)

// TimeSplit is where the wall time of a Run call went. Start, Steps, Eval,
// Checkpoint and Final are its parts and add up to Wall (up to the loop's
// own bookkeeping); the checkpoint writes ran beside them.
type TimeSplit struct {
	Wall time.Duration // the whole call
	// Start is the time before the first step: the checks, the resume, the
	// output files and the checkpoints' snapshot memory.
	Start time.Duration
	// Steps is the time in steps: the micro-batches, the gradient's
	// all-reduce and clipping, the update, the metrics and progress.
	Steps time.Duration
	// Eval is the time in evaluations (Hooks.Eval).
	Eval time.Duration
	// Checkpoint is the time training stalled for checkpoints: the
	// snapshots, the waits for the write before, OnCheckpoint.
	Checkpoint time.Duration
	// Final is the time after the last step: the wait for the last
	// checkpoint's write and the plot.
	Final time.Duration

	// Snapshot is the part of Checkpoint spent copying into host memory,
	// SnapshotBytes what was copied.
	Snapshot      time.Duration
	SnapshotBytes int64
	// Writing is the time the checkpoint writes took in the background
	// (not a part of Wall's split: training ran meanwhile), WrittenBytes
	// what the durable ones wrote.
	Writing      time.Duration
	WrittenBytes int64
	// Samples is the samples the steps counted (StepInfo.Count; 0: none).
	Samples float64
}

// times adds to a metrics record the cumulative seconds of this call so
// far in steps, evaluations and checkpoint stalls, with step and eval the
// time of the step or evaluation being recorded, and the wall seconds since
// the first step (which those three split).
func (r *runner) times(vals map[string]float64, step, eval time.Duration) {
	vals["time_steps_s"] = (r.time.Steps + step).Seconds()
	vals["time_eval_s"] = (r.time.Eval + eval).Seconds()
	vals["time_ckpt_s"] = r.time.Checkpoint.Seconds()
	vals["time_wall_s"] = time.Since(r.firstStep).Seconds()
}

// log writes the split in one line, with the rate over the wall time and
// over the steps alone (samples when the steps counted them).
func (t TimeSplit) log() {
	attrs := []any{"wall_s", secs(t.Wall), "start_s", secs(t.Start), "steps_s", secs(t.Steps), "eval_s", secs(t.Eval),
		"ckpt_stall_s", secs(t.Checkpoint), "final_s", secs(t.Final), "ckpt_write_s", secs(t.Writing), "ckpt_written_gb", gb(t.WrittenBytes)}
	if t.Samples > 0 {
		attrs = append(attrs, "samples_per_s_wall", round3(t.Samples/max(t.Wall.Seconds(), 1e-9)),
			"samples_per_s_steps", round3(t.Samples/max(t.Steps.Seconds(), 1e-9)))
	}
	slog.Info("run time", attrs...)
}
