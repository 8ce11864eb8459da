package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// StepInfo is what Run tells Step about the micro-batch to compute.
type StepInfo struct {
	Step   int     // 0-based index of the optimizer step
	Micro  int     // 0-based micro-batch within the step
	Micros int     // micro-batches per step (Config.GradAccum)
	LR     float64 // learning rate this step will use
	RNG    *RNG    // the training stream; draw all of the step's randomness from it
}

// EvalInfo is what Run tells Eval.
type EvalInfo struct {
	Step int  // optimizer steps completed
	RNG  *RNG // a stream that depends only on the seed and Step
	Spec bool // include the real acceptance length (Config.SpecEvalEvery)
}

// Hooks connect a model to Run.
type Hooks struct {
	// Params are the trainable parameters (their Data is restored on resume).
	Params []*Param
	// Step computes one micro-batch: it adds the gradient of its loss into each
	// Param.Grad (Run zeroes them before a step's first micro-batch and divides by
	// the micro-batch count after the last) and returns the loss, optional metrics
	// (an "acc" entry shows in the progress line) and the tokens processed.
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
}

// Run trains for cfg.Steps optimizer steps (or until cfg.StopAt) with AdamW,
// warmup+cosine learning rate, gradient accumulation and clipping, evaluating every
// cfg.EvalEvery steps and checkpointing every cfg.SaveEvery steps, at the end and when
// ctx is cancelled (then it returns ctx's error). With cfg.Resume it continues from
// the newest valid checkpoint in cfg.Out; without, it refuses an output directory that
// already holds checkpoints. Progress goes to stderr, metrics to cfg.Out/metrics.jsonl.
func Run(ctx context.Context, cfg Config, h Hooks) (*Result, error) {
	return run(ctx, cfg, h, os.Stderr)
}

func run(ctx context.Context, cfg Config, h Hooks, stderr io.Writer) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h.Step == nil || len(h.Params) == 0 {
		panic("train: Run needs Hooks.Step and Hooks.Params")
	}
	if (h.DataState == nil) != (h.RestoreData == nil) {
		panic("train: Hooks.DataState and Hooks.RestoreData go together")
	}
	checkParams(h.Params)
	began := time.Now()
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	opt := NewAdamW(h.Params, AdamWConfig{Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay})
	sched := Schedule{BaseLR: cfg.LR, WarmupSteps: cfg.WarmupSteps, TotalSteps: cfg.Steps, MinLRRatio: cfg.MinLRRatio}
	rng := NewRNG(cfg.Seed, StreamTrain)
	st := TrainerState{Seed: cfg.Seed, Schedule: sched, Best: map[string]float64{}, BestStep: map[string]int{}}
	res := &Result{}
	metricsPath := filepath.Join(cfg.Out, MetricsFile)

	if cfg.Resume {
		l, err := LoadLatest(cfg.Out)
		switch {
		case errors.Is(err, ErrNoCheckpoint):
			slog.Info("no checkpoint to resume from; starting fresh", "out", cfg.Out, "detail", err)
			if err := os.Remove(metricsPath); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		case err != nil:
			return nil, err
		default:
			if err := resume(l, &st, cfg, h, opt, rng); err != nil {
				return nil, err
			}
			for _, s := range l.Skipped {
				slog.Warn("skipped invalid checkpoint", "why", s)
			}
			slog.Info("resumed", "checkpoint", l.Dir, "step", st.Step)
			if err := truncateMetrics(metricsPath, st.Step); err != nil {
				return nil, err
			}
		}
	} else {
		steps, err := listCheckpoints(cfg.Out)
		if err != nil {
			return nil, err
		}
		if len(steps) > 0 {
			return nil, fmt.Errorf("%s already holds checkpoints (newest %s): pass resume, or choose another out", cfg.Out, CheckpointName(steps[0]))
		}
		if err := os.Remove(metricsPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	res.StartStep = st.Step
	mlog, err := openMetrics(metricsPath)
	if err != nil {
		return nil, err
	}
	defer mlog.close()

	end := cfg.Steps
	if cfg.StopAt > 0 {
		end = min(end, cfg.StopAt)
	}
	prog := newProgress(stderr, cfg.Progress, cfg.LogEvery, st.Step, cfg.Steps)
	elapsedBefore := st.ElapsedSec
	lastSaved := st.Step // nothing new to save before a step is done

	// boundary captures the RNG and data position at a step boundary, so that a
	// checkpoint taken after a cancelled step records the state before it.
	type boundary struct {
		rng  []byte
		data json.RawMessage
	}
	capture := func() (boundary, error) {
		var b boundary
		var err error
		if b.rng, err = rng.MarshalBinary(); err != nil {
			return b, err
		}
		if h.DataState != nil {
			if b.data, err = h.DataState(); err != nil {
				return b, fmt.Errorf("data state: %w", err)
			}
		}
		return b, nil
	}
	save := func(b boundary) error {
		if st.Step == lastSaved {
			return nil
		}
		var modelCfg []byte
		if h.ModelConfig != nil {
			var err error
			if modelCfg, err = h.ModelConfig(); err != nil {
				return fmt.Errorf("model config: %w", err)
			}
		}
		s := st
		s.RNG, s.DataPosition = b.rng, b.data
		s.ElapsedSec = elapsedBefore + time.Since(began).Seconds()
		dir, err := SaveCheckpoint(cfg.Out, &Checkpoint{Config: modelCfg, Params: h.Params, Optimizer: opt, State: s}, cfg.KeepCheckpoints)
		if err != nil {
			return fmt.Errorf("checkpoint at step %d: %w", st.Step, err)
		}
		lastSaved = st.Step
		res.Checkpoint = dir
		if h.OnCheckpoint != nil {
			h.OnCheckpoint(dir, st.Step)
		}
		return nil
	}

	cur, err := capture()
	if err != nil {
		return nil, err
	}
	for st.Step < end {
		if ctx.Err() != nil {
			break
		}
		step := st.Step
		stepStart := time.Now()
		lr := sched.LR(step)
		ZeroGrads(h.Params)
		var loss float64
		var tokens int
		sums := map[string]float64{}
		var stepErr error
		for micro := range cfg.GradAccum {
			l, m, tok, err := h.Step(ctx, StepInfo{Step: step, Micro: micro, Micros: cfg.GradAccum, LR: lr, RNG: rng})
			if err != nil {
				stepErr = err
				break
			}
			loss += l
			tokens += tok
			for k, v := range m {
				sums[k] += v
			}
		}
		if stepErr != nil {
			if ctx.Err() != nil {
				break // cancelled mid-step: the step is dropped, cur is its start
			}
			return nil, fmt.Errorf("step %d: %w", step+1, stepErr)
		}
		inv := 1 / float64(cfg.GradAccum)
		loss *= inv
		if cfg.GradAccum > 1 {
			ScaleGrads(h.Params, float32(inv))
		}
		norm := ClipGradNorm(h.Params, cfg.GradClip)
		if math.IsNaN(loss) || math.IsInf(loss, 0) || math.IsNaN(norm) || math.IsInf(norm, 0) {
			return nil, fmt.Errorf("step %d: non-finite loss %g or gradient norm %g", step+1, loss, norm)
		}
		opt.Step(lr)
		st.Step++
		st.Tokens += int64(tokens)
		st.LR = lr
		res.LastLoss = loss
		vals := map[string]float64{"loss": loss, "lr": lr, "grad_norm": norm, "tokens": float64(st.Tokens),
			"tokens_per_s": float64(tokens) / max(time.Since(stepStart).Seconds(), 1e-9)}
		for k, v := range sums {
			if _, clash := vals[k]; !clash {
				vals[k] = v * inv
			}
		}
		if err := mlog.write(Record{Kind: "train", Step: st.Step, Time: time.Since(began).Seconds(), Values: vals}); err != nil {
			return nil, err
		}
		acc, hasAcc := vals["acc"]
		prog.update(st.Step, loss, acc, hasAcc, tokens)

		spec := cfg.SpecEval.due(st.Step, end)
		if h.Eval != nil && (cfg.EvalEvery > 0 && st.Step%cfg.EvalEvery == 0 || st.Step == end || spec) {
			ev, err := h.Eval(ctx, EvalInfo{Step: st.Step, RNG: NewRNG(cfg.Seed, StreamEval<<32|uint64(st.Step)), Spec: spec})
			if err != nil {
				if ctx.Err() == nil {
					return nil, fmt.Errorf("eval at step %d: %w", st.Step, err)
				}
			} else {
				res.LastEval = ev
				updateBest(&st, ev)
				if err := mlog.write(Record{Kind: "eval", Step: st.Step, Time: time.Since(began).Seconds(), Values: ev}); err != nil {
					return nil, err
				}
				prog.note(formatEval(st.Step, ev))
			}
		}
		if cur, err = capture(); err != nil {
			return nil, err
		}
		if cfg.SaveEvery > 0 && st.Step%cfg.SaveEvery == 0 || st.Step == end {
			if err := save(cur); err != nil {
				return nil, err
			}
		}
	}
	prog.finish(st.Step)
	if ctx.Err() != nil {
		if err := save(cur); err != nil {
			return nil, err
		}
	}
	res.Steps, res.Tokens, res.Best, res.Elapsed = st.Step, st.Tokens, st.Best, time.Since(began)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if cfg.Plot && st.Step == cfg.Steps {
		if err := PlotMetrics(metricsPath, filepath.Join(cfg.Out, PlotFile)); err != nil {
			slog.Warn("plot not written", "err", err)
		}
	}
	return res, nil
}

func resume(l *Loaded, st *TrainerState, cfg Config, h Hooks, opt *AdamW, rng *RNG) error {
	ls := l.State
	if ls.Seed != cfg.Seed {
		return fmt.Errorf("%s: seed %d, config says %d", l.Dir, ls.Seed, cfg.Seed)
	}
	if ls.Schedule != st.Schedule {
		slog.Warn("learning-rate schedule differs from the checkpoint's; using the config's", "checkpoint", ls.Schedule, "config", st.Schedule)
	}
	if ls.Step > cfg.Steps {
		return fmt.Errorf("%s: checkpoint is at step %d, past steps = %d", l.Dir, ls.Step, cfg.Steps)
	}
	if err := l.Restore(h.Params, opt); err != nil {
		return err
	}
	if err := rng.UnmarshalBinary(ls.RNG); err != nil {
		return fmt.Errorf("%s: %w", l.Dir, err)
	}
	if h.RestoreData != nil {
		if err := h.RestoreData(ls.DataPosition); err != nil {
			return fmt.Errorf("%s: restore data position: %w", l.Dir, err)
		}
	}
	st.Step, st.Tokens, st.LR, st.ElapsedSec = ls.Step, ls.Tokens, ls.LR, ls.ElapsedSec
	if ls.Best != nil {
		st.Best, st.BestStep = ls.Best, ls.BestStep
	}
	if st.BestStep == nil {
		st.BestStep = map[string]int{}
	}
	return nil
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

func formatEval(step int, ev map[string]float64) string {
	var parts []string
	for _, k := range []string{"loss", "acc", "tau", "spec_tau"} {
		if v, ok := ev[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.4f", k, v))
		}
	}
	return fmt.Sprintf("eval @ %d: %s", step, strings.Join(parts, " "))
}
