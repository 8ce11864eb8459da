package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"dflash/internal/rngstream"
	"dflash/tensor"
)

// StepInfo is what Run tells Step about the micro-batch to compute.
type StepInfo struct {
	Step   int     // 0-based index of the optimizer step
	Micro  int     // 0-based micro-batch within the step
	Micros int     // micro-batches per step (Config.GradAccum)
	LR     float64 // learning rate this step will use
	RNG    *RNG    // the training stream; draw all of the step's randomness from it

	work *stepWork // where Count adds
}

// EvalInfo is what Run tells Eval.
type EvalInfo struct {
	Step int  // optimizer steps completed
	RNG  *RNG // a stream that depends only on the seed and Step
	Spec bool // include the real acceptance length (Config.SpecEvalEvery)
}

// Hooks connect a model to Run.
type Hooks struct {
	// Backend holds Arena and runs the optimizer (tensor.Optimizer): the
	// CPU, or a device the arena was placed on with master values.
	Backend tensor.Backend[float32]
	// Arena holds the trainable parameters (their values are restored on
	// resume); Run allocates its flat gradient when it has none and keeps
	// AdamW's state beside it on Backend (Params).
	Arena *tensor.Arena[float32]
	// Step computes one micro-batch: it adds the gradient of its loss into
	// the arena's gradient (Run zeroes it before a step's first micro-batch
	// and divides by the micro-batch count after the last) and returns the
	// loss, optional metrics (an "acc" entry shows in the progress line)
	// and the tokens processed.
	Step func(ctx context.Context, s StepInfo) (loss float64, metrics map[string]float64, tokens int, err error)
	// Eval, optional, evaluates on held-out data.
	Eval func(ctx context.Context, e EvalInfo) (map[string]float64, error)
	// DataState, optional, returns the data iterator's position; RestoreData sets it.
	DataState   func() (json.RawMessage, error)
	RestoreData func(json.RawMessage) error
	// ModelConfig, optional, returns config.json for checkpoints.
	ModelConfig func() ([]byte, error)
	// OnCheckpoint, optional, is called after each checkpoint is durable.
	OnCheckpoint func(dir string, step int)
	// Identity, optional, names what makes this run this run (shapes, taps, data and
	// tokenizer hashes...). It is stored in every checkpoint, and a resume whose
	// identity differs is refused, listing the differing entries, unless
	// Config.ResumeAnyway.
	Identity map[string]string
	// Collective, optional, makes this Run one rank of a data-parallel group:
	// each rank's Step computes its share of the global batch (the same
	// global order on every rank), Run sums the gradients over the ranks in
	// buckets and divides by the rank count, so that clipping and the update
	// are the same on every rank, and averages the loss and metrics. Only
	// rank 0 evaluates and writes checkpoints, metrics, progress and the
	// plot; every rank reads the checkpoint it resumes from. With one rank
	// Run makes no collective call. The collective must reach the arena's
	// gradient (Params.GradRange): host memory for a LocalGroup, the
	// device's for an NCCL collective.
	Collective Collective
	// BucketBytes is the size of the gradient buckets of the all-reduce
	// (0: DefaultBucketBytes).
	BucketBytes int64
	// Gauges, optional, reads the rank's state after a step (device memory
	// in use and at its peak, kernels compiled so far...); the lead rank
	// adds the readings to each train record under their names.
	Gauges func() map[string]float64
	// PeakTFLOPS, optional, is the peak FLOP rate of a rank's device in
	// TFLOP/s: with FLOPs counted by the steps (StepInfo.Count), train
	// records gain mfu, the model FLOPs utilisation.
	PeakTFLOPS float64
}

// Result summarises a Run.
type Result struct {
	StartStep  int                // steps already done when Run began (resume)
	Steps      int                // steps done at the end
	Tokens     int64              // tokens over the whole run, resumed parts included
	LastLoss   float64            // loss of the last step
	LastEval   map[string]float64 // metrics of the last evaluation
	Best       map[string]float64 // best eval metrics over the run
	Checkpoint string             // the last checkpoint written
	Elapsed    time.Duration      // wall time of this call
	Time       TimeSplit          // where that time went
}

// Run trains for cfg.Steps optimizer steps (or until cfg.StopAt) with AdamW,
// warmup+cosine learning rate, gradient accumulation and clipping, evaluating every
// cfg.EvalEvery steps and checkpointing every cfg.SaveEvery steps, at the end and when
// ctx is cancelled (then it returns ctx's error). Checkpoints are written in the
// background from a copy in host memory taken at the step boundary (ckptwrite.go);
// Run returns once the last one is durable, and a checkpoint that failed to be
// written fails the run at its end. With cfg.Resume it continues from
// the newest valid checkpoint in cfg.Out; without, it refuses an output directory that
// already holds checkpoints. Progress goes to stderr, metrics to cfg.Out/metrics.jsonl
// and (cfg.TensorBoard) to TensorBoard event files beside it; the run ends with a log
// line that splits its time (Result.Time).
func Run(ctx context.Context, cfg Config, h Hooks) (*Result, error) {
	return run(ctx, cfg, h, os.Stderr)
}

func run(ctx context.Context, cfg Config, h Hooks, stderr io.Writer) (_ *Result, err error) {
	began := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	checkHooks(h)
	params, err := NewParams(h.Backend, h.Arena, cfg.AdamW())
	if err != nil {
		return nil, err
	}
	r := newRunner(cfg, h, params, began)
	if !r.lead {
		stderr, cfg.Progress = io.Discard, "off"
	} else if err := CheckOutDir(cfg.Out); err != nil {
		return nil, err
	}
	if err := r.start(); err != nil {
		return nil, err
	}
	mlog, err := openMetrics(r.metricsPath, r.lead)
	if err != nil {
		return nil, err
	}
	defer mlog.close()
	r.mlog = mlog
	if cfg.TensorBoard && r.lead {
		if mlog.tb, err = openEvents(cfg.Out, cfg.Resume, r.st.Step); err != nil {
			return nil, err
		}
	}
	r.prog = newProgress(stderr, cfg.Progress, cfg.LogEvery, r.st.Step, cfg.Steps)
	r.snapAt = r.st.Step + snapshotAfter
	// Whatever ends the run (a panic too), the write in flight reads the
	// snapshot memory until it is done.
	defer func() { err = errors.Join(err, r.endWrites()) }()
	if err := r.loop(ctx); err != nil {
		return nil, err
	}
	return r.finish(ctx)
}

// checkHooks panics on hooks that break Run's contract (programmer errors).
func checkHooks(h Hooks) {
	if h.Step == nil || h.Backend == nil || h.Arena == nil || len(h.Arena.Params()) == 0 {
		panic("train: Run needs Hooks.Step, Hooks.Backend and Hooks.Arena with parameters")
	}
	if (h.DataState == nil) != (h.RestoreData == nil) {
		panic("train: Hooks.DataState and Hooks.RestoreData go together")
	}
}

// CheckOutDir creates dir when needed and checks that files can be written in it.
func CheckOutDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("output directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// runner is the state of one Run, advanced phase by phase: start (fresh or resumed),
// loop (steps, evaluations, checkpoints), finish.
type runner struct {
	cfg         Config
	h           Hooks
	params      *Params   // h.Arena on h.Backend, with AdamW's state
	sync        *gradSync // nil on one rank
	lead        bool      // rank 0 (or the only one): writes the output directory
	sched       Schedule
	rng         *RNG
	st          TrainerState
	res         *Result
	mlog        *metricsLog
	prog        *progress
	metricsPath string
	began       time.Time
	firstStep   time.Time     // when this call's first step began (zero: none yet)
	time        TimeSplit     // this call's so far
	elapsed     float64       // seconds of the run before this call (resume)
	lastSaved   int           // step of the last checkpoint snapshot taken or resumed from
	lastDurable int           // step of the last checkpoint written or resumed from
	lastStep    time.Duration // how long the last finished step took (0: none yet)
	end         int           // step after which this call stops

	snap      *paramSnapshot // the checkpoints' host memory (lead rank)
	snapAt    int            // the step after which allocSnapshot starts (snapshotAfter steps into this call)
	snapAlloc chan error     // allocSnapshot's result, until snapshot takes it
	inflight  *bgWrite       // the checkpoint write in flight (nil: none)
	writeErrs []error        // the writes that failed, for the end of the run
}

// boundary is the RNG and data position at a step boundary, so that a checkpoint
// taken after a cancelled step records the state before it.
type boundary struct {
	rng  []byte
	data json.RawMessage
}

func newRunner(cfg Config, h Hooks, params *Params, began time.Time) *runner {
	sched := Schedule{BaseLR: cfg.LR, WarmupSteps: cfg.WarmupSteps, TotalSteps: cfg.Steps, MinLRRatio: cfg.MinLRRatio}
	r := &runner{cfg: cfg, h: h, params: params, sched: sched, began: began, res: &Result{},
		rng:         NewRNG(cfg.Seed, rngstream.Train),
		st:          TrainerState{Seed: cfg.Seed, Schedule: sched, Best: map[string]float64{}, BestStep: map[string]int{}, Identity: h.Identity},
		metricsPath: filepath.Join(cfg.Out, MetricsFile),
		end:         cfg.Steps,
	}
	r.sync = newGradSync(h, params)
	r.lead = h.Collective == nil || h.Collective.Rank() == 0
	if cfg.StopAt > 0 {
		r.end = min(r.end, cfg.StopAt)
	}
	return r
}

// start resumes from the newest checkpoint (cfg.Resume) or checks that the output
// directory holds none, and trims metrics.jsonl to match.
func (r *runner) start() error {
	cfg := r.cfg
	if !cfg.Resume {
		steps, err := listCheckpoints(cfg.Out)
		if err != nil {
			return err
		}
		if len(steps) > 0 {
			// Send the user to --resume only when it has something to resume from.
			l, err := LoadLatest(cfg.Out)
			if err != nil {
				return err
			}
			return fmt.Errorf("%s already holds checkpoints (newest valid: %s): pass --resume to continue that run, or choose another --out", cfg.Out, filepath.Base(l.Dir))
		}
		if !r.lead {
			return nil
		}
		if err := os.Remove(r.metricsPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return removeEvents(cfg.Out)
	}
	l, err := LoadLatest(cfg.Out)
	var corrupt *CorruptError
	switch {
	case errors.As(err, &corrupt):
		return fmt.Errorf("--resume: %w", err)
	case errors.Is(err, ErrNoCheckpoint):
		return fmt.Errorf("--resume: nothing to resume from: %w; start without --resume for a fresh run", err)
	}
	if err != nil {
		return err
	}
	if err := resume(l, &r.st, cfg, r.h, r.params, r.rng); err != nil {
		return withSkipped(err, l.Skipped)
	}
	for _, s := range l.Skipped {
		slog.Warn("skipped invalid checkpoint", "why", s)
	}
	slog.Info("resumed", "checkpoint", l.Dir, "step", r.st.Step)
	r.res.StartStep, r.res.Checkpoint = r.st.Step, l.Dir
	r.elapsed, r.lastSaved, r.lastDurable = r.st.ElapsedSec, r.st.Step, r.st.Step
	if !r.lead {
		return nil
	}
	return truncateMetrics(r.metricsPath, r.st.Step)
}

// loop runs steps until the end, the stop step or cancellation; it checkpoints
// every cfg.SaveEvery steps, at the end, and after a cancellation. It adds the
// time of each phase to r.time: the steps, the evaluations, and the checkpoints'
// stalls (snapshots, waits for the write before, OnCheckpoint).
func (r *runner) loop(ctx context.Context) error {
	cur, err := r.capture()
	if err != nil {
		return err
	}
	for r.st.Step < r.end && ctx.Err() == nil {
		t0 := time.Now()
		if r.firstStep.IsZero() {
			r.firstStep, r.time.Start = t0, t0.Sub(r.began)
			r.prog.begin(t0)
		}
		done, err := r.step(ctx, t0)
		r.lastStep = time.Since(t0)
		r.time.Steps += r.lastStep
		if err != nil {
			return err
		}
		if !done {
			break // cancelled mid-step: the step is dropped, cur is its start
		}
		if r.st.Step >= r.snapAt {
			r.allocSnapshot()
		}
		t1 := time.Now()
		r.pollWrite()
		r.time.Checkpoint += time.Since(t1)
		if err := r.evaluate(ctx); err != nil {
			return err
		}
		t2 := time.Now()
		if cur, err = r.capture(); err != nil {
			return err
		}
		t3 := time.Now()
		r.time.Steps += t3.Sub(t2)
		if r.cfg.SaveEvery > 0 && r.st.Step%r.cfg.SaveEvery == 0 || r.st.Step == r.end {
			if err := r.save(cur); err != nil {
				return err
			}
		}
		r.time.Checkpoint += time.Since(t3)
	}
	r.prog.finish(r.st.Step)
	if ctx.Err() != nil {
		t := time.Now()
		defer func() { r.time.Checkpoint += time.Since(t) }()
		return r.save(cur)
	}
	return nil
}

// stopping logs that a stop was asked for during step (0-based), begun at
// start: the step runs to its end and is dropped, a checkpoint of the step
// before is written, and a second signal exits at once without one. last,
// the previous step's time, estimates how long that takes.
func stopping(step int, start time.Time, last time.Duration) {
	attrs := []any{"step", step + 1, "running_s", roundS(time.Since(start))}
	if last > 0 {
		attrs = append(attrs, "expected_left_s", roundS(max(0, last-time.Since(start))))
	}
	slog.Warn("stop asked for: the current step runs to its end and is dropped, then the last finished step is checkpointed (a second signal exits at once, without a checkpoint)", attrs...)
}

// roundS returns d in seconds, to 0.1 s.
func roundS(d time.Duration) float64 { return d.Round(100 * time.Millisecond).Seconds() }

// step runs one optimizer step: the micro-batches, clipping, the update, the
// metrics record and the progress line. It returns false when ctx was cancelled
// during the step, which is then dropped.
func (r *runner) step(ctx context.Context, stepStart time.Time) (bool, error) {
	cfg, h := r.cfg, r.h
	step := r.st.Step
	// A step is not stopped between its layers: a stop asked for during it
	// waits for its end. Say so at once, and about how long that is.
	// The step waits for the message when it has begun, so that it is
	// logged before anything the step's end logs.
	last, said := r.lastStep, make(chan struct{})
	stop := context.AfterFunc(ctx, func() { stopping(step, stepStart, last); close(said) })
	defer func() {
		if !stop() {
			<-said
		}
	}()
	lr := r.sched.LR(step)
	r.params.ZeroGrad()
	var loss float64
	var tokens int
	var work stepWork
	sums := map[string]float64{}
	for micro := range cfg.GradAccum {
		l, m, tok, err := h.Step(ctx, StepInfo{Step: step, Micro: micro, Micros: cfg.GradAccum, LR: lr, RNG: r.rng, work: &work})
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			return false, fmt.Errorf("step %d: %w", step+1, err)
		}
		loss += l
		tokens += tok
		for k, v := range m {
			sums[k] += v
		}
	}
	inv := 1 / float64(cfg.GradAccum)
	scale := inv
	ranks := 1
	if r.sync != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		ranks = r.sync.coll.Size()
		totals := []float64{float64(tokens), work.samples, work.flops}
		err := r.sync.allReduce()
		if err == nil {
			err = r.sync.average(&loss, totals, sums)
		}
		if err != nil {
			return false, fmt.Errorf("step %d: %w", step+1, err)
		}
		tokens, work.samples, work.flops = int(totals[0]), totals[1], totals[2]
		scale /= float64(ranks)
	}
	loss *= inv
	if scale != 1 {
		r.params.ScaleGrad(float32(scale))
	}
	norm := r.params.ClipGradNorm(cfg.GradClip)
	if math.IsNaN(loss) || math.IsInf(loss, 0) || math.IsNaN(norm) || math.IsInf(norm, 0) {
		return false, fmt.Errorf("step %d: non-finite loss %g or gradient norm %g", step+1, loss, norm)
	}
	r.params.Step(lr)
	r.st.Step++
	r.st.Tokens += int64(tokens)
	r.st.LR = lr
	r.res.LastLoss = loss
	vals := map[string]float64{"loss": loss, "lr": lr, "grad_norm": norm, "tokens": float64(r.st.Tokens)}
	work.rates(vals, tokens, time.Since(stepStart).Seconds(), ranks, h.PeakTFLOPS)
	r.time.Samples += work.samples
	r.times(vals, time.Since(stepStart), 0)
	for k, v := range sums {
		if _, clash := vals[k]; !clash {
			vals[k] = v * inv
		}
	}
	if h.Gauges != nil && r.lead {
		for k, v := range h.Gauges() {
			if _, clash := vals[k]; !clash {
				vals[k] = v
			}
		}
	}
	if err := r.mlog.write(Record{Kind: "train", Step: r.st.Step, Time: time.Since(r.began).Seconds(), Values: vals}); err != nil {
		return false, err
	}
	acc, hasAcc := vals["acc"]
	r.prog.update(r.st.Step, time.Now(), stepLine{loss: loss, acc: acc, hasAcc: hasAcc, tokens: tokens, samples: int(work.samples)})
	return true, nil
}

// evaluate runs Hooks.Eval when it is due (every cfg.EvalEvery steps and at the
// end); an evaluation cut short by cancellation is dropped.
func (r *runner) evaluate(ctx context.Context) error {
	st := &r.st
	spec := r.cfg.SpecEval.due(st.Step, r.end)
	if r.h.Eval == nil || !r.lead || !(r.cfg.EvalEvery > 0 && st.Step%r.cfg.EvalEvery == 0 || st.Step == r.end || spec) {
		return nil
	}
	t0 := time.Now()
	defer func() { r.time.Eval += time.Since(t0) }()
	ev, err := r.h.Eval(ctx, EvalInfo{Step: st.Step, RNG: NewRNG(r.cfg.Seed, rngstream.Eval<<32|uint64(st.Step)), Spec: spec})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("eval at step %d: %w", st.Step, err)
	}
	took := time.Since(t0)
	r.res.LastEval = ev
	updateBest(st, ev)
	vals := maps.Clone(ev)
	r.times(vals, 0, took)
	if err := r.mlog.write(Record{Kind: "eval", Step: st.Step, Time: time.Since(r.began).Seconds(), Values: vals}); err != nil {
		return err
	}
	r.prog.note(formatEval(st.Step, ev, took))
	return nil
}

func (r *runner) capture() (boundary, error) {
	var b boundary
	var err error
	if b.rng, err = r.rng.MarshalBinary(); err != nil {
		return b, err
	}
	if r.h.DataState != nil {
		if b.data, err = r.h.DataState(); err != nil {
			return b, fmt.Errorf("data state: %w", err)
		}
	}
	return b, nil
}

// finish waits for the last checkpoint's write, at the natural end of the run
// writes the plot, fills the result and logs the split of the run's time. It
// returns ctx's error after a stop and the failures of the checkpoint writes.
func (r *runner) finish(ctx context.Context) (*Result, error) {
	t0 := time.Now()
	if r.firstStep.IsZero() {
		r.time.Start = t0.Sub(r.began)
	}
	err := r.endWrites()
	res, st := r.res, r.st
	if ctx.Err() != nil {
		err = errors.Join(ctx.Err(), err)
	} else if r.cfg.Plot && st.Step == r.cfg.Steps && r.lead {
		if err := PlotMetrics(r.metricsPath, filepath.Join(r.cfg.Out, PlotFile)); err != nil {
			slog.Warn("plot not written", "err", err)
		}
	}
	r.time.Final = time.Since(t0)
	res.Steps, res.Tokens, res.Best, res.Elapsed = st.Step, st.Tokens, st.Best, time.Since(r.began)
	r.time.Wall = res.Elapsed
	res.Time = r.time
	if r.lead {
		r.time.log()
	}
	return res, err
}

// updateBest keeps, per eval metric, the best value: the lowest for names that are
// "loss" or end in "loss", the highest otherwise.
func updateBest(st *TrainerState, ev map[string]float64) {
	for k, v := range ev {
		if math.IsNaN(v) {
			continue
		}
		lower := k == "loss" || strings.HasSuffix(k, "_loss") || strings.HasPrefix(k, "loss_")
		b, ok := st.Best[k]
		if !ok || lower && v < b || !lower && v > b {
			st.Best[k] = v
			st.BestStep[k] = st.Step
		}
	}
}

func formatEval(step int, ev map[string]float64, took time.Duration) string {
	var parts []string
	for _, k := range []string{"loss", "acc", "tau", "spec_tau"} {
		if v, ok := ev[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.4f", k, v))
		}
	}
	return fmt.Sprintf("eval @ %d: %s (%.1f s)", step, strings.Join(parts, " "), took.Seconds())
}
