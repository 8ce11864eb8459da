package recipe

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"dflash/data"
	"dflash/data/chat"
	"dflash/data/tokenizer"
	"dflash/internal/rngstream"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
	"dflash/train"
	"dflash/train/traincuda"
)

// Result is what a training job did.
type Result struct {
	// Train is the lead rank's train.Result (steps, tokens, the last
	// evaluation, the last checkpoint); nil when no step ran. Run returns
	// it with an error too: an interrupted run's names its checkpoint.
	Train *train.Result
	// Drafter is the directory the trained drafter was exported to (empty
	// but in the process of rank 0 after a run that ended well).
	Drafter string
	// Buckets is each length bucket's steps and what became of its graph
	// regions (tensor.Backend.Replay's kinds: captured, launched, recaptured,
	// eager, ungraphed), by bucket length; nil without buckets.
	Buckets []BucketSteps
}

// BucketSteps is one length bucket's share of a run.
type BucketSteps struct {
	Len, Steps int
	Replays    map[string]int
}

// job is a Spec made ready to train: everything the ranks share.
type job struct {
	spec        Spec
	place       traincuda.Placement
	targetCfg   *model.Config
	dc          *dflash.Config
	train, eval []dflash.Example
	tok         *tokenizer.Tokenizer
	pad         int32
	pack        *dflash.Packing   // the packed rows (nil: batches of a sample a row)
	id          map[string]string // the run's identity (train.Hooks.Identity)
	lead        *dflash.Session   // the session of this process's first rank; its drafter is exported
	// evalBatches and evalElems are the evaluation cache's batches and
	// elements (dflash.EvalCacheSize; 0 with --data.cache-hidden, which
	// keeps the states on the host); evalCache whether the rank on the CPU
	// keeps it (checkMemory; on CUDA each rank decides, checkDeviceMemory).
	evalBatches int
	evalElems   float64
	evalCache   bool
	// prepared is how long prepare took, preparedAt when it ended (Run
	// sets them, for the start line).
	prepared   time.Duration
	preparedAt time.Time
	// leadReady returns once the lead session's drafter has its values
	// (newSession).
	leadReady func()
}

// Run trains the drafter of s: it checks the placement of the ranks, reads
// the target's shape, tokenizer and chat template, chooses the mask token,
// reads and splits the conversations, and then trains every rank of this
// process (on the CPU one; on CUDA one per GPU, each on its GPU's worker
// thread), each on its own replica of the target and of the drafter from
// the same seed. The process of rank 0 logs each bucket's steps and exports
// the drafter to OUT/drafter. Everything before the first step is checked
// first, and errors name the option as the user gave it (Spec.Source).
func Run(ctx context.Context, s Spec) (*Result, error) {
	began := time.Now()
	j, err := prepare(ctx, s)
	if err != nil {
		return nil, err
	}
	j.preparedAt = time.Now()
	j.prepared = j.preparedAt.Sub(began)
	var res *train.Result
	if s.Device == "cuda" {
		res, err = j.trainOnGPUs(ctx)
	} else {
		res, err = j.trainRank(ctx, rankEnv{backend: tensor.NewCPU[float32](s.Workers), first: true})
	}
	out := &Result{Train: res}
	if err != nil || !j.place.Lead() {
		return out, notWritten(err, s.Out)
	}
	steps, replays := j.lead.BucketSteps(), j.lead.Replays()
	for _, l := range slices.Sorted(maps.Keys(steps)) {
		r := replays[l]
		out.Buckets = append(out.Buckets, BucketSteps{Len: l, Steps: steps[l], Replays: r})
		slog.Info("bucket steps", "len", l, "steps", steps[l], "graph_captured", r["captured"], "graph_launched", r["launched"],
			"graph_recaptured", r["recaptured"], "eager", r["eager"], "ungraphed", r["ungraphed"])
	}
	dir := filepath.Join(s.Out, "drafter")
	if err := j.lead.Drafter.Export(dir, s.Drafter.Export, j.tok); err != nil {
		return out, notWritten(err, s.Out)
	}
	out.Drafter = dir
	return out, nil
}

// prepare does everything before the ranks start: the placement, the
// target's config (its weights are loaded onto each rank's backend when it
// starts), tokenizer and chat template, the mask token and the taps, the
// data and its split, the drafter's config, the run's identity, the pad
// token and the lead session.
func prepare(ctx context.Context, s Spec) (*job, error) {
	fp8 := s.TargetDType == "fp8"
	switch {
	case s.TargetDType != "" && s.TargetDType != "bf16" && !fp8:
		return nil, fmt.Errorf("%s %q: bf16 or fp8", s.source("target-dtype"), s.TargetDType)
	case fp8 && s.Device != "cuda":
		return nil, fmt.Errorf("%s fp8: the FP8 target runs on cuda (add --device cuda)", s.source("target-dtype"))
	case fp8 && s.SpecEvalEvery > 0:
		return nil, fmt.Errorf("%s %d with %s fp8: a spec evaluation would decode with the FP8 target, not the one that serves; set it to 0",
			s.source("spec-eval-every"), s.SpecEvalEvery, s.source("target-dtype"))
	}
	s.SpecEvalEvery = specEvalEvery(s.SpecEvalEvery, s.Device, fp8)
	place, err := placement(&s)
	if err != nil {
		return nil, err
	}
	if s.Data.Pack && s.Data.Buckets > 0 {
		return nil, fmt.Errorf("%s %d: length buckets are for batches of a conversation a row; with packed rows (the default) every batch has one shape already: add --data.pack=false to use buckets", s.source("data.buckets"), s.Data.Buckets)
	}
	if place.World > 1 && s.Data.Buckets > 0 {
		return nil, fmt.Errorf("%s %d with %d ranks: not yet (the bucket sampler is not sharded across ranks); set it to 0", s.source("data.buckets"), s.Data.Buckets, place.World)
	}
	tc, err := model.ReadConfig(filepath.Join(s.TargetDir, "config.json"))
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.LoadDir(s.TargetDir)
	if err != nil {
		return nil, err
	}
	tmpl, err := chat.Load(s.TargetDir, tok)
	if err != nil {
		return nil, err
	}
	mask, err := MaskToken(s.Drafter.MaskTokenID, tok, tc.VocabSize)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.source("drafter.mask-token-id"), err)
	}
	if _, err := dflash.MaskTokenName(tok, mask); err != nil {
		return nil, fmt.Errorf("%s: %w", s.source("drafter.mask-token-id"), err)
	}
	if err := dflash.CheckTaps(s.Drafter.Taps, tc.NumLayers); err != nil {
		return nil, fmt.Errorf("%s %v: %w", s.source("drafter.taps"), s.Drafter.Taps, err)
	}
	examples, err := readConversations(ctx, s, data.Target{Tokenizer: tok, Template: tmpl, Vocab: tc.VocabSize, Context: tc.MaxPositionEmbeddings})
	if err != nil {
		return nil, err
	}
	if len(examples) < 2 {
		return nil, fmt.Errorf("%s: %d usable conversations, need at least 2", strings.Join(s.DataPaths, ", "), len(examples))
	}
	j := &job{spec: s, place: place, targetCfg: tc, tok: tok, pad: PadToken(tok)}
	j.train, j.eval = Split(examples, s.Seed, s.Data.EvalFraction, s.Data.EvalMax)
	j.dc = DrafterConfig(tc, s.Drafter, mask)
	if err := j.dc.Validate(); err != nil {
		return nil, fmt.Errorf("drafter config: %w", err)
	}
	dflash.WarnTaps(slog.Default(), j.dc.TargetLayerIDs, tc.NumLayers)
	packLen := 0
	if s.Data.Pack {
		p, err := dflash.NewPacking(j.train, j.eval, j.dc.NumAnchors, s.Data.PackLen)
		if err != nil {
			return nil, fmt.Errorf("%s %d: %w", s.source("data.pack-len"), s.Data.PackLen, err)
		}
		j.pack, packLen = &p, p.Len
	}
	if !s.Data.CacheHidden {
		if j.evalBatches, j.evalElems, err = dflash.EvalCacheSize(j.eval, s.Data.BatchSize, j.pack, s.Seed, j.dc); err != nil {
			return nil, fmt.Errorf("%s: %w", s.source("data.pack-len"), err)
		}
	}
	if err := j.checkMemory(); err != nil {
		return nil, err
	}
	if j.id, err = runIdentity(s.TargetDir, s.DataPaths, j.dc, tok, len(j.train), len(j.eval), s.Data.Buckets, packLen); err != nil {
		return nil, err
	}
	j.lead, j.leadReady = j.newSession()
	dc := j.dc
	slog.Info("drafter", "layers", dc.NumLayers, "taps", dc.TargetLayerIDs, "block", dc.BlockSize, "mask", dc.MaskTokenID,
		"gamma", dc.Gamma, "train", len(j.train), "eval", len(j.eval), "device", s.Device, "ranks", place.World)
	if err := logBuckets(j.lead); err != nil {
		return nil, fmt.Errorf("%s: %w", s.source("data.buckets"), err)
	}
	if err := logPacking(j.lead); err != nil {
		return nil, fmt.Errorf("%s: %w", s.source("data.pack"), err)
	}
	return j, nil
}

// newSession returns a session with a new replica of the drafter, made from
// the run's seed so that every rank starts from the same weights, and no
// target yet (trainRank gives it the rank's). The drafter's values are
// made beside what follows (dflash.NewAsync): they are there once ready
// has returned.
func (j *job) newSession() (sess *dflash.Session, ready func()) {
	s, dc, tc := &j.spec, j.dc, j.targetCfg
	d, ready := dflash.NewAsync[float32](dc, rand.New(rand.NewPCG(s.Seed, rngstream.Init)))
	return &dflash.Session{Drafter: d, Train: j.train, Eval: j.eval, BatchSize: s.Data.BatchSize, Pad: j.pad,
		Seed: s.Seed, CacheHidden: s.Data.CacheHidden, Buckets: s.Data.Buckets, Pack: j.pack, EvalAnchors: s.Data.EvalAnchors,
		StepFLOPs: func(b *dflash.Batch, bl *dflash.Blocks) float64 {
			return dflash.StepFLOPs(tc, dc, b, bl).Total()
		}}, ready
}

// logBuckets logs the length buckets of the training batches, each with its
// shape and padded fraction, and the padded fraction of an epoch.
func logBuckets(sess *dflash.Session) error {
	r, err := sess.BucketReport()
	if err != nil || r == nil {
		return err
	}
	for _, b := range r.Buckets {
		slog.Info("bucket", "len", b.Len, "rows", b.Rows, "samples", b.Samples, "batches", b.Batches,
			"padded", b.Padded, "pad_frac", fmt.Sprintf("%.3f", b.Waste))
	}
	slog.Info("buckets", "n", len(r.Buckets), "batches", r.Batches, "tokens", r.Tokens, "padded", r.Padded,
		"pad_frac", fmt.Sprintf("%.3f", r.Waste), "pad_frac_all_longest", fmt.Sprintf("%.3f", r.WasteUnbucketed))
	return nil
}

// logPacking logs the packed rows of the training batches: their shape,
// samples a row, padding, and the share of the anchors they keep.
func logPacking(sess *dflash.Session) error {
	r, err := sess.PackReport()
	if err != nil || r == nil {
		return err
	}
	slog.Info("packed rows", "len", r.RowLen, "blocks", r.Blocks, "rows_per_epoch", r.Rows, "batches", r.Batches,
		"samples_per_row", fmt.Sprintf("%.2f", r.PerRow), "pad_frac", fmt.Sprintf("%.3f", r.Waste),
		"anchors_kept", fmt.Sprintf("%.3f", r.AnchorsKept), "block_use", fmt.Sprintf("%.3f", r.BlockUse))
	return nil
}

// readConversations reads the training samples (data.Load: a prepared
// directory or JSONL, every id checked against the target) as examples.
func readConversations(ctx context.Context, s Spec, t data.Target) ([]dflash.Example, error) {
	opts := s.Data.Options
	opts.BlockSize = s.Drafter.BlockSize
	samples, sum, err := data.Load(ctx, s.DataPaths, opts, t, s.Workers)
	if err != nil {
		return nil, err
	}
	slog.Info("data", "input", s.DataPaths, "read", sum.Lines, "kept", sum.Kept, "truncated", sum.Truncated,
		"bad_lines", sum.BadFiles, "dropped", sum.Dropped)
	out := make([]dflash.Example, len(samples))
	for i, s := range samples {
		out[i] = dflash.Example{IDs: s.IDs, Mask: s.Mask}
	}
	return out, nil
}
