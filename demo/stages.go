package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"dflash/data/chat"
	"dflash/data/tokenizer"
	"dflash/internal/rngstream"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/recipe"
	"dflash/tensor"
	"dflash/train"
)

// runner is one Run: its stages (methods, in Run's order) fill res and hand
// what the next stage needs through the fields below.
type runner struct {
	o       Options
	res     *Result
	st      *stageTimer
	dir     string
	backend tensor.Backend[float32]

	// tokenizer
	docs   []Document
	bpe    *BPE
	tok    *tokenizer.Tokenizer
	tmpl   *chat.Template
	tokDir string
	imEnd  int
	pad    int32
	// target, conversations, drafter
	targetModel *model.Model
	tcfg        model.Config
	convs       []dflash.Example
	users       []string // each conversation's user message (the held-out ones first after drafter)
	dcfg        *dflash.Config
	trainSet    []dflash.Example
	evalSet     []dflash.Example
	draft       *dflash.Drafter[float32]
	sess        *dflash.Session
	fp8         *trained // the drafter trained on the FP8 target's states (Options.TargetDType fp8)
}

// workDir sets r.dir: o.Dir (made, its training subdirectories cleared) or a
// temporary directory that cleanup removes.
func (r *runner) workDir() (cleanup func(), err error) {
	if r.o.Dir == "" {
		tmp, err := os.MkdirTemp("", "dflash-demo-")
		if err != nil {
			return nil, err
		}
		r.dir = tmp
		return func() { os.RemoveAll(tmp) }, nil
	}
	r.dir, r.res.Dir = r.o.Dir, r.o.Dir
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	for _, sub := range []string{"target-train", "drafter-train", "drafter-fp8-train"} { // a fresh run each time
		if err := os.RemoveAll(filepath.Join(r.dir, sub)); err != nil {
			return nil, err
		}
	}
	return func() {}, nil
}

// tokenizer reads the corpus and trains the BPE tokenizer, written with its
// chat template into dir/target.
func (r *runner) tokenizer(context.Context) error {
	o, res := r.o, r.res
	done := r.st.begin("corpus")
	docs, err := GoCorpus(CorpusOptions{Root: o.CorpusDir, MaxBytes: o.CorpusBytes})
	if err != nil {
		return err
	}
	r.docs = docs
	res.CorpusFiles, res.CorpusBytes = len(docs), TotalBytes(docs)
	done()
	done = r.st.begin("tokenizer")
	texts := make([]string, len(docs))
	for i, d := range docs {
		texts[i] = d.Text
	}
	if r.bpe, err = TrainBPE(texts, BPEOptions{VocabSize: o.Vocab, Specials: DemoSpecials}); err != nil {
		return err
	}
	r.tokDir = filepath.Join(r.dir, "target")
	if err := r.bpe.WriteTokenizerDir(r.tokDir); err != nil {
		return err
	}
	if r.tok, err = tokenizer.LoadDir(r.tokDir); err != nil {
		return fmt.Errorf("demo tokenizer: %w", err)
	}
	if r.tmpl, err = chat.Load(r.tokDir, r.tok); err != nil {
		return fmt.Errorf("demo chat template: %w", err)
	}
	res.Vocab = r.tok.VocabSize()
	r.imEnd, _ = r.bpe.SpecialID(TokImEnd)
	r.pad = recipe.PadToken(r.tok)
	done()
	return nil
}

// target trains a small Qwen3 on chat-formatted code continuations on the
// demo's backend (its parameters placed there with master values) and
// saves it beside its tokenizer; it stays there, frozen, for the stages
// after.
func (r *runner) target(ctx context.Context) error {
	o, res := r.o, r.res
	done := r.st.begin("target")
	rng := rand.New(rand.NewPCG(o.Seed, 11))
	pairs := codePairs(r.docs, o.PromptLines, o.ReplyLines, rng)
	var seqs [][]int32
	for _, p := range pairs {
		ids, _, err := r.tmpl.Encode(r.tok, []chat.Message{{Role: "user", Content: p[0]}, {Role: "assistant", Content: p[1]}}, chat.Options{})
		if err != nil {
			continue // a token crossing a turn boundary: skip the pair
		}
		if len(ids) > o.MaxSeq {
			ids = ids[:o.MaxSeq]
		}
		seqs = append(seqs, ids)
	}
	heads := max(1, o.TargetHidden/o.TargetHeadDim)
	r.tcfg = model.Config{Arch: model.Qwen3, VocabSize: res.Vocab, HiddenSize: o.TargetHidden,
		IntermediateSize: 3 * o.TargetHidden, NumLayers: o.TargetLayers, NumHeads: heads,
		NumKVHeads: max(1, heads/2), HeadDim: o.TargetHidden / heads, RMSNormEps: 1e-6, RopeTheta: 10000,
		MaxPositionEmbeddings: 4096, EOSTokenIDs: []int{r.imEnd}, InitializerRange: 0.02}
	target, err := model.New(r.tcfg, o.Seed)
	if err != nil {
		return err
	}
	r.targetModel = target
	target.Arena().Place(r.backend, true)
	res.TargetParams = target.NumParams()
	tc := train.DefaultConfig()
	tc.Out, tc.Steps, tc.LR, tc.WarmupSteps, tc.Seed = filepath.Join(r.dir, "target-train"), o.TargetSteps, o.TargetLR, max(20, o.TargetSteps/20), o.Seed
	tc.SaveEvery, tc.KeepCheckpoints, tc.Plot, tc.Progress, tc.WeightDecay = 0, 1, false, o.Progress, 0.0
	tr, err := TrainTarget(ctx, target, seqs, o.TargetBatch, r.pad, tc, r.backend)
	if err != nil {
		return fmt.Errorf("train target: %w", err)
	}
	res.TargetLoss = tr.LastLoss
	target.Arena().Fetch(r.backend) // the trained values, for the file
	if err := target.Save(r.tokDir, "F32"); err != nil {
		return err
	}
	target.Arena().Place(r.backend, false)
	done()
	return nil
}

// conversations makes the drafter's data: prompts from the corpus, greedy
// responses of the target.
func (r *runner) conversations(ctx context.Context) error {
	done := r.st.begin("generate")
	prng := rand.New(rand.NewPCG(r.o.Seed, 12))
	convs, users, genTok, err := generate(ctx, r.targetModel, r.backend, r.tok, r.tmpl, r.docs, r.o, int32(r.imEnd), prng, r.o.Stderr)
	if err != nil {
		return err
	}
	r.convs, r.users = convs, users
	r.res.Conversations, r.res.GeneratedTokens = len(convs), genTok
	done()
	return nil
}

// drafter builds the drafter, evaluates it on the held-out eighth of the
// conversations, trains it on the rest, evaluates it again and writes it
// to dir/drafter. With Options.TargetDType fp8 it then trains a twin (the
// same initial weights and batches) on the states of the target held in
// FP8, written to dir/drafter-fp8, and evaluates it on the bf16 target's
// states, the target that serves (Result.FP8).
func (r *runner) drafter(ctx context.Context) error {
	o, res := r.o, r.res
	done := r.st.begin("drafter")
	// The drafter as the training recipe makes it, but for its taps: the
	// DraftLayers+1 deepest layers but the last, ascending, given as
	// --drafter.taps would give them. The recipe's default spreads the taps
	// from layer 1 to L-3, an empty range for the demo's target of a few
	// layers.
	taps := make([]int, min(o.DraftLayers+1, r.tcfg.NumLayers-1))
	for i := range taps {
		taps[i] = r.tcfg.NumLayers - 1 - len(taps) + i
	}
	mask, err := recipe.MaskToken(-1, r.tok, r.tcfg.VocabSize)
	if err != nil {
		return err
	}
	r.dcfg = recipe.DrafterConfig(&r.targetModel.Config, recipe.DrafterOptions{Layers: o.DraftLayers, Taps: taps, BlockSize: o.BlockSize, Anchors: o.Anchors}, mask)
	res.Taps, res.BlockSize = taps, o.BlockSize
	// The recipe's split, an eighth held out: each conversation keeps its
	// user message (the held-out prompts the spec stage decodes).
	order := make([]int, len(r.convs))
	for i := range order {
		order[i] = i
	}
	trainIDs, evalIDs := recipe.Split(order, o.Seed, 1.0/8, len(order))
	users := make([]string, 0, len(r.users))
	for _, i := range evalIDs {
		r.evalSet, users = append(r.evalSet, r.convs[i]), append(users, r.users[i])
	}
	for _, i := range trainIDs {
		r.trainSet, users = append(r.trainSet, r.convs[i]), append(users, r.users[i])
	}
	r.users = users
	bf16 := dflash.TargetHidden(r.targetModel, taps, r.backend)
	d, err := r.trainDrafter(ctx, "drafter", bf16, true)
	if err != nil {
		return err
	}
	r.draft, r.sess = d.draft, d.sess
	for _, p := range d.draft.Params() {
		res.DrafterParams += p.Numel()
	}
	res.TrainLossFirst, res.TrainLossLast, res.DrafterTokensPerS = d.lossFirst, d.lossLast, d.tokensPerS
	res.LossBefore, res.LossAfter = d.before.Loss(), d.after.Loss()
	res.AccuracyBefore, res.AccuracyAfter = d.before.Accuracy(), d.after.Accuracy()
	res.SlotAccuracyBefore, res.SlotAccuracyAfter = d.before.SlotAccuracy()[1:], d.after.SlotAccuracy()[1:]
	res.AcceptanceBefore, res.AcceptanceAfter = d.before.Acceptance(), d.after.Acceptance()
	res.EvalBlocks = d.after.Blocks
	done()
	if o.TargetDType != "fp8" {
		return nil
	}
	done = r.st.begin("drafter-fp8")
	fp8Target, _, err := model.LoadWith(r.tokDir, r.backend, model.LoadOptions{FP8: true})
	if err != nil {
		return fmt.Errorf("the FP8 target: %w", err)
	}
	fp8 := dflash.TargetHidden(fp8Target, taps, r.backend)
	f := &FP8Result{}
	if f.TapRelErr, err = dflash.TapErrors(r.backend, r.evalSet[:min(len(r.evalSet), o.DraftBatch)], r.pad, fp8, bf16); err != nil {
		return err
	}
	t, err := r.trainDrafter(ctx, "drafter-fp8", fp8, false)
	if err != nil {
		return err
	}
	// Served on the bf16 target: the held-out evaluation, its decoding
	// and the per-anchor walk read the bf16 states from here on.
	t.sess.Hidden = bf16
	if t.after, err = t.sess.Evaluate(); err != nil {
		return err
	}
	r.fp8 = t
	f.TrainLossLast, f.DrafterTokensPerS = t.lossLast, t.tokensPerS
	f.LossAfter, f.AccuracyAfter, f.AcceptanceAfter = t.after.Loss(), t.after.Accuracy(), t.after.Acceptance()
	res.FP8 = f
	done()
	return nil
}

// trained is one drafter trained by trainDrafter.
type trained struct {
	draft               *dflash.Drafter[float32]
	sess                *dflash.Session
	before, after       *dflash.Metrics // before is nil unless asked for
	lossFirst, lossLast float64         // means over the first and last tenth of the steps
	tokensPerS          float64
}

// trainDrafter makes a drafter of r.dcfg from the seed, trains it on
// r.trainSet with the target states hidden gives, evaluates it on
// r.evalSet (before training too when before is set) and exports it to
// dir/name (its training run in dir/name-train).
func (r *runner) trainDrafter(ctx context.Context, name string, hidden dflash.HiddenFunc, before bool) (*trained, error) {
	o := r.o
	drafter := dflash.New[float32](r.dcfg, rand.New(rand.NewPCG(o.Seed, rngstream.Init)))
	drafter.Arena().Place(r.backend, true)
	// The target's hidden states are kept in host memory on the CPU; on a
	// device its pass costs less than copying them back in.
	sess := &dflash.Session{Drafter: drafter, Head: dflash.HeadOf(r.targetModel), Hidden: hidden, Backend: r.backend,
		Train: r.trainSet, Eval: r.evalSet, BatchSize: o.DraftBatch, Pad: r.pad, Seed: o.Seed, CacheHidden: r.backend.HostParams()}
	t := &trained{draft: drafter, sess: sess}
	var err error
	if before {
		if t.before, err = sess.Evaluate(); err != nil {
			return nil, err
		}
	}
	dcfg := train.DefaultConfig()
	dcfg.Out, dcfg.Steps, dcfg.LR, dcfg.WarmupSteps, dcfg.Seed = filepath.Join(r.dir, name+"-train"), o.DraftSteps, o.DraftLR, 20, o.Seed
	dcfg.SaveEvery, dcfg.KeepCheckpoints, dcfg.Plot, dcfg.Progress, dcfg.EvalEvery = 0, 1, o.Dir != "", o.Progress, 0
	var losses []float64
	hooks := recipe.Hooks(sess, nil)
	step := hooks.Step
	hooks.Step = func(ctx context.Context, s train.StepInfo) (float64, map[string]float64, int, error) {
		l, m, n, err := step(ctx, s)
		losses = append(losses, l)
		return l, m, n, err
	}
	dr, err := train.Run(ctx, dcfg, hooks)
	if err != nil {
		return nil, fmt.Errorf("train %s: %w", name, err)
	}
	// Training loss at the start and the end: means over the first and last
	// tenth of the steps (single batches are noisy).
	k := max(1, len(losses)/10)
	t.lossFirst, t.lossLast = mean(losses[:k]), mean(losses[len(losses)-k:])
	if s := dr.Elapsed.Seconds(); s > 0 {
		t.tokensPerS = float64(dr.Tokens) / s
	}
	if t.after, err = sess.Evaluate(); err != nil {
		return nil, err
	}
	drafter.Arena().Fetch(r.backend) // the trained values, for the file
	if err := drafter.Export(filepath.Join(r.dir, name), "F32", r.tok); err != nil {
		return nil, err
	}
	drafter.Arena().Place(r.backend, false)
	return t, nil
}

// decode runs real speculative decoding of held-out prompts with the trained
// drafter, beside the simulated acceptance over the same prompts.
func (r *runner) decode(ctx context.Context) error {
	o, res, sess := r.o, r.res, r.sess
	done := r.st.begin("spec")
	if o.Dir != "" {
		nEval := len(sess.Eval)
		if err := writeHeldOut(filepath.Join(r.dir, HeldOutFile), r.users[:min(nEval, o.SpecPrompts)]); err != nil {
			return err
		}
	}
	var err error
	if res.Spec, err = decodeHeldOut(ctx, r.targetModel, r.draft, sess.Eval, o, int32(r.imEnd), r.backend); err != nil {
		return err
	}
	if res.AcceptanceAllAnchors, res.AcceptanceWalk, err = anchorAcceptance(sess, sess.Eval[:min(len(sess.Eval), o.SpecPrompts)]); err != nil {
		return err
	}
	if t := r.fp8; t != nil {
		f := res.FP8
		if f.Spec, err = decodeHeldOut(ctx, r.targetModel, t.draft, sess.Eval, o, int32(r.imEnd), r.backend); err != nil {
			return err
		}
		if f.AcceptanceAllAnchors, f.AcceptanceWalk, err = anchorAcceptance(t.sess, sess.Eval[:min(len(sess.Eval), o.SpecPrompts)]); err != nil {
			return err
		}
	}
	done()
	return nil
}
