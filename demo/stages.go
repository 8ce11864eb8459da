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
	users       []string // each conversation's user message
	draft       *dflash.Drafter[float32]
	sess        *dflash.Session
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
	for _, sub := range []string{"target-train", "drafter-train"} { // a fresh run each time
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
// to dir/drafter.
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
	dc := recipe.DrafterConfig(&r.targetModel.Config, recipe.DrafterOptions{Layers: o.DraftLayers, Taps: taps, BlockSize: o.BlockSize, Anchors: o.Anchors}, mask)
	drafter := dflash.New[float32](dc, rand.New(rand.NewPCG(o.Seed, rngstream.Init)))
	r.draft = drafter
	drafter.Arena().Place(r.backend, true)
	res.Taps, res.BlockSize = taps, o.BlockSize
	for _, p := range drafter.Params() {
		res.DrafterParams += p.Numel()
	}
	// The recipe's split, an eighth held out: each conversation keeps its
	// user message (the held-out prompts the spec stage decodes).
	order := make([]int, len(r.convs))
	for i := range order {
		order[i] = i
	}
	trainIDs, evalIDs := recipe.Split(order, o.Seed, 1.0/8, len(order))
	var trainSet, evalSet []dflash.Example
	users := make([]string, 0, len(r.users))
	for _, i := range evalIDs {
		evalSet, users = append(evalSet, r.convs[i]), append(users, r.users[i])
	}
	for _, i := range trainIDs {
		trainSet, users = append(trainSet, r.convs[i]), append(users, r.users[i])
	}
	r.users = users
	// The target's hidden states are kept in host memory on the CPU; on a
	// device its pass costs less than copying them back in.
	sess := &dflash.Session{Drafter: drafter, Head: dflash.HeadOf(r.targetModel),
		Hidden: dflash.TargetHidden(r.targetModel, taps, r.backend), Backend: r.backend,
		Train: trainSet, Eval: evalSet, BatchSize: o.DraftBatch, Pad: r.pad, Seed: o.Seed, CacheHidden: r.backend.HostParams()}
	r.sess = sess
	before, err := sess.Evaluate()
	if err != nil {
		return err
	}
	dcfg := train.DefaultConfig()
	dcfg.Out, dcfg.Steps, dcfg.LR, dcfg.WarmupSteps, dcfg.Seed = filepath.Join(r.dir, "drafter-train"), o.DraftSteps, o.DraftLR, 20, o.Seed
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
		return fmt.Errorf("train drafter: %w", err)
	}
	// Training loss at the start and the end: means over the first and last
	// tenth of the steps (single batches are noisy).
	k := max(1, len(losses)/10)
	res.TrainLossFirst, res.TrainLossLast = mean(losses[:k]), mean(losses[len(losses)-k:])
	if s := dr.Elapsed.Seconds(); s > 0 {
		res.DrafterTokensPerS = float64(dr.Tokens) / s
	}
	after, err := sess.Evaluate()
	if err != nil {
		return err
	}
	drafter.Arena().Fetch(r.backend) // the trained values, for the file
	if err := drafter.Export(filepath.Join(r.dir, "drafter"), "F32", r.tok); err != nil {
		return err
	}
	drafter.Arena().Place(r.backend, false)
	done()
	res.LossBefore, res.LossAfter = before.Loss(), after.Loss()
	res.AccuracyBefore, res.AccuracyAfter = before.Accuracy(), after.Accuracy()
	res.SlotAccuracyBefore, res.SlotAccuracyAfter = before.SlotAccuracy()[1:], after.SlotAccuracy()[1:]
	res.AcceptanceBefore, res.AcceptanceAfter = before.Acceptance(), after.Acceptance()
	res.EvalBlocks = after.Blocks
	return nil
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
	done()
	return nil
}
