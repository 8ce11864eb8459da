package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"dflash/data/chat"
	"dflash/data/tokenizer"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/spec"
	"dflash/tensor"
	"dflash/train/traincuda"
)

// Options sizes the demo. Zero fields take Defaults' values.
type Options struct {
	Dir    string // working directory (tokenizer, target, drafter, metrics); empty: a temp dir removed at the end
	Seed   uint64
	Device string // cpu, or cuda: every stage but the corpus and the tokenizer on GPU GPU (GPUDefaults' sizes)
	GPU    int    // the GPU of Device cuda
	// Workers is the CPU goroutines (0: GOMAXPROCS).
	Workers int
	// CorpusDir is the directory of Go source the corpus is read from
	// (empty: GOROOT/src; GoCorpus).
	CorpusDir     string
	CorpusBytes   int
	Vocab         int
	TargetHidden  int
	TargetHeadDim int // the target's head dimension (heads: TargetHidden / TargetHeadDim)
	TargetLayers  int
	TargetSteps   int
	TargetBatch   int
	TargetLR      float64
	PromptLines   int // lines of code in a prompt
	ReplyLines    int // lines of code in a target training reply
	MaxSeq        int // max tokens of a target training sequence
	Prompts       int // conversations generated
	GenTokens     int // max new tokens per response
	// GenBatch, when not 0, generates the responses GenBatch prompts at a
	// time on the demo's backend (greedyBatched); 0: one at a time per
	// goroutine on the CPU with a KV cache.
	GenBatch    int
	DraftLayers int
	BlockSize   int
	Anchors     int
	DraftSteps  int
	DraftBatch  int
	DraftLR     float64
	SpecPrompts int // held-out prompts decoded speculatively at the end (at most)
	// TargetDType fp8 (Device cuda) also trains a twin drafter on the
	// target's states with its matrices in FP8 and serves it on the bf16
	// target (Result.FP8); "" or bf16: the demo's drafter only.
	TargetDType string
	Progress    string // train progress mode: auto, bar, lines, off
	Stderr      io.Writer
}

// Defaults returns the demo's standard sizes: about 4 minutes on 2 shared cores.
func Defaults() Options {
	return Options{Seed: 1, Device: "cpu", CorpusBytes: 1 << 20, Vocab: 1024, TargetHidden: 128, TargetHeadDim: 32, TargetLayers: 4,
		TargetSteps: 200, TargetBatch: 12, TargetLR: 3e-3, PromptLines: 5, ReplyLines: 6, MaxSeq: 128,
		Prompts: 224, GenTokens: 96, DraftLayers: 1, BlockSize: 8, Anchors: 24, DraftSteps: 400,
		DraftBatch: 8, DraftLR: 3e-3, SpecPrompts: 16, Progress: "auto"}
}

// GPUDefaults returns the demo's sizes on one GPU (Device cuda): a Qwen3
// target of 8 layers, hidden 512 and 8 heads of 64 (4 kv heads), 27M
// parameters, trained for 1500 steps of 64 sequences of up to 256 tokens
// on up to 16 MiB of Go source (BPE vocabulary 4096); 12288 conversations
// of up to 128 greedy tokens generated 768 at a time; a drafter of 2
// layers, block 16, trained for 3000 steps of 64 conversations (about 18
// passes over its 10752: with 2048 conversations and 36 passes it learned
// them by heart, training loss 0.14 against 6.6 held out); 32 held-out
// prompts decoded. 92 s on an H200 with 2048 conversations.
func GPUDefaults() Options {
	return Options{Seed: 1, Device: "cuda", CorpusBytes: 16 << 20, Vocab: 4096, TargetHidden: 512, TargetHeadDim: 64, TargetLayers: 8,
		TargetSteps: 1500, TargetBatch: 64, TargetLR: 1e-3, PromptLines: 8, ReplyLines: 12, MaxSeq: 256,
		Prompts: 12288, GenTokens: 128, GenBatch: 768, DraftLayers: 2, BlockSize: 16, Anchors: 64, DraftSteps: 3000,
		DraftBatch: 64, DraftLR: 1e-3, SpecPrompts: 32, Progress: "auto"}
}

func (o *Options) fill() {
	d := Defaults()
	if o.Device == "cuda" {
		d = GPUDefaults()
	}
	if o.Device == "" {
		o.Device = d.Device
	}
	set := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	set(&o.CorpusBytes, d.CorpusBytes)
	set(&o.Vocab, d.Vocab)
	set(&o.TargetHidden, d.TargetHidden)
	set(&o.TargetHeadDim, d.TargetHeadDim)
	set(&o.TargetLayers, d.TargetLayers)
	set(&o.TargetSteps, d.TargetSteps)
	set(&o.TargetBatch, d.TargetBatch)
	set(&o.PromptLines, d.PromptLines)
	set(&o.ReplyLines, d.ReplyLines)
	set(&o.MaxSeq, d.MaxSeq)
	set(&o.Prompts, d.Prompts)
	set(&o.GenTokens, d.GenTokens)
	set(&o.GenBatch, d.GenBatch)
	set(&o.DraftLayers, d.DraftLayers)
	set(&o.BlockSize, d.BlockSize)
	set(&o.Anchors, d.Anchors)
	set(&o.DraftSteps, d.DraftSteps)
	set(&o.DraftBatch, d.DraftBatch)
	set(&o.SpecPrompts, d.SpecPrompts)
	if o.DraftLR == 0 {
		o.DraftLR = d.DraftLR
	}
	if o.TargetLR == 0 {
		o.TargetLR = d.TargetLR
	}
	if o.Progress == "" {
		o.Progress = d.Progress
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
}

// Stage is one timed step of the demo.
type Stage struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// Result is what the demo reports.
type Result struct {
	CorpusFiles        int       `json:"corpus_files"`
	CorpusBytes        int       `json:"corpus_bytes"`
	Vocab              int       `json:"vocab"`
	TargetParams       int       `json:"target_params"`
	TargetLoss         float64   `json:"target_loss"`
	Conversations      int       `json:"conversations"`
	GeneratedTokens    int       `json:"generated_tokens"`
	DrafterParams      int       `json:"drafter_params"`
	BlockSize          int       `json:"block_size"`
	Taps               []int     `json:"taps"`
	LossBefore         float64   `json:"loss_before"`
	LossAfter          float64   `json:"loss_after"`
	AccuracyBefore     float64   `json:"accuracy_before"`
	AccuracyAfter      float64   `json:"accuracy_after"`
	SlotAccuracyBefore []float64 `json:"slot_accuracy_before"`
	SlotAccuracyAfter  []float64 `json:"slot_accuracy_after"`
	AcceptanceBefore   float64   `json:"acceptance_before"`
	AcceptanceAfter    float64   `json:"acceptance_after"`
	TrainLossFirst     float64   `json:"train_loss_first"` // mean over the first tenth of the steps
	TrainLossLast      float64   `json:"train_loss_last"`  // mean over the last tenth
	DrafterTokensPerS  float64   `json:"drafter_tokens_per_s"`
	EvalBlocks         int64     `json:"eval_blocks"`
	// Spec is real speculative decoding (greedy) of held-out prompts with
	// the trained drafter, beside the simulated AcceptanceAfter.
	Spec *spec.Report `json:"spec"`
	// AcceptanceAllAnchors is the simulated acceptance length on the
	// prompts of Spec with every response position as an anchor, and
	// AcceptanceWalk what real decoding's anchors (a → a + τ(a)) give
	// from those per-anchor values (docs/DRAFTER.md §7.1).
	AcceptanceAllAnchors float64 `json:"acceptance_all_anchors"`
	AcceptanceWalk       float64 `json:"acceptance_walk"`
	Stages               []Stage `json:"stages"`
	Seconds              float64 `json:"seconds"`
	Dir                  string  `json:"dir,omitempty"`
	// Device is "cuda" when the demo ran on a GPU (empty on the CPU).
	Device string `json:"device,omitempty"`
	// FP8, with Options.TargetDType fp8, is the twin drafter trained on
	// the FP8 target's states and served on the bf16 target.
	FP8 *FP8Result `json:"fp8,omitempty"`
}

// FP8Result is the drafter of the same initial weights and batches as the
// demo's, trained on the states of the target held in FP8 (--target-dtype
// fp8 of dflash train) and evaluated and decoded on the bf16 target: what
// training on FP8 states costs a drafter that serves beside bf16 weights.
type FP8Result struct {
	// TapRelErr is each tap's ‖h_fp8 − h_bf16‖/‖h_bf16‖ on the first
	// held-out batch (dflash.TapErrors).
	TapRelErr            []float64    `json:"tap_rel_err"`
	TrainLossLast        float64      `json:"train_loss_last"` // on the FP8 states
	LossAfter            float64      `json:"loss_after"`      // held out, on the bf16 states
	AccuracyAfter        float64      `json:"accuracy_after"`
	AcceptanceAfter      float64      `json:"acceptance_after"`
	DrafterTokensPerS    float64      `json:"drafter_tokens_per_s"`
	Spec                 *spec.Report `json:"spec"`
	AcceptanceAllAnchors float64      `json:"acceptance_all_anchors"`
	AcceptanceWalk       float64      `json:"acceptance_walk"`
}

type stageTimer struct {
	res   *Result
	start time.Time
}

func (t *stageTimer) begin(name string) func() {
	t0 := time.Now()
	slog.Info("demo stage", "stage", name)
	return func() {
		s := time.Since(t0).Seconds()
		t.res.Stages = append(t.res.Stages, Stage{name, s})
		slog.Info("demo stage done", "stage", name, "seconds", fmt.Sprintf("%.1f", s))
	}
}

// Run builds everything from scratch and trains a drafter (see the package
// doc); it returns the before/after evaluation.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.fill()
	t0 := time.Now()
	switch {
	case o.TargetDType != "" && o.TargetDType != "bf16" && o.TargetDType != "fp8":
		return nil, fmt.Errorf("demo: target dtype %q: bf16 or fp8", o.TargetDType)
	case o.TargetDType == "fp8" && o.Device != "cuda":
		return nil, fmt.Errorf("demo: target dtype fp8: the FP8 target runs on cuda (add --device cuda)")
	}
	r := &runner{o: o, res: &Result{}}
	r.st = &stageTimer{res: r.res, start: t0}
	cleanup, err := r.workDir()
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if o.Device == "cuda" {
		r.res.Device = o.Device
		err = traincuda.RunOne(ctx, o.GPU, "--gpu", func(g traincuda.RankEnv) error { return r.stages(ctx, g.Backend) })
	} else {
		err = r.stages(ctx, tensor.NewCPU[float32](o.Workers))
	}
	if err != nil {
		return nil, err
	}
	r.res.Seconds = time.Since(t0).Seconds()
	return r.res, nil
}

// stages runs the demo's stages in order on backend b.
func (r *runner) stages(ctx context.Context, b tensor.Backend[float32]) error {
	r.backend = b
	for _, stage := range []func(context.Context) error{
		r.tokenizer,     // 1. corpus and tokenizer
		r.target,        // 2. a small Qwen3 target trained on chat-formatted code continuations
		r.conversations, // 3. prompts from the corpus, greedy responses of the target
		r.drafter,       // 4. the drafter, evaluated before and after training
		r.decode,        // 5. real speculative decoding of held-out prompts
	} {
		if err := stage(ctx); err != nil {
			return err
		}
	}
	return nil
}

// codePairs cuts every document into consecutive (prompt, reply) line
// windows, shuffled.
func codePairs(docs []Document, promptLines, replyLines int, rng *rand.Rand) [][2]string {
	var out [][2]string
	for _, d := range docs {
		lines := strings.SplitAfter(d.Text, "\n")
		for i := 0; i+promptLines+replyLines <= len(lines); i += promptLines + replyLines {
			p := strings.Join(lines[i:i+promptLines], "")
			r := strings.Join(lines[i+promptLines:i+promptLines+replyLines], "")
			if strings.TrimSpace(p) == "" || (replyLines > 0 && strings.TrimSpace(r) == "") {
				continue
			}
			out = append(out, [2]string{p, r})
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// generate makes o.Prompts conversations: a prompt of PromptLines lines from
// the corpus rendered with the chat template (with the generation prompt),
// followed by the target's greedy response tokens and <|im_end|>; the mask
// marks the response tokens. It also returns each conversation's user
// message. With o.GenBatch the responses are decoded GenBatch prompts at a
// time on b (greedyBatched), else one prompt at a time per goroutine on
// the CPU with a KV cache (greedyEach).
func generate(ctx context.Context, m *model.Model, b tensor.Backend[float32], tok *tokenizer.Tokenizer, tmpl *chat.Template, docs []Document, o Options, stop int32, rng *rand.Rand, w io.Writer) ([]dflash.Example, []string, int, error) {
	pairs := codePairs(docs, o.PromptLines, 0, rng)
	if len(pairs) > o.Prompts {
		pairs = pairs[:o.Prompts]
	}
	prompts := make([][]int32, len(pairs))
	for i, p := range pairs {
		text, _, err := tmpl.Render([]chat.Message{{Role: "user", Content: p[0]}}, chat.Options{AddGenerationPrompt: true})
		if err != nil {
			return nil, nil, 0, err
		}
		prompts[i] = tok.Encode(text)
	}
	var outs [][]int32
	var err error
	if o.GenBatch > 0 {
		outs, err = greedyBatched(ctx, m, b, prompts, o, stop, w)
	} else {
		outs, err = greedyEach(ctx, m, prompts, o, stop, w)
	}
	if err != nil {
		return nil, nil, 0, err
	}
	var convs []dflash.Example
	var users []string
	genTok := 0
	for i, ids := range prompts {
		out := outs[i]
		genTok += len(out)
		// The conversation is the rendered prompt followed by exactly the
		// tokens the target produced (re-encoding the reply's text could
		// merge tokens differently); the mask marks the response and its
		// end-of-turn token, as data/chat's assistant-only rule does.
		if len(out) <= 1 {
			continue
		}
		if out[len(out)-1] != stop {
			out = append(out, stop)
		}
		ex := dflash.Example{IDs: append(ids[:len(ids):len(ids)], out...), Mask: make([]uint8, len(ids)+len(out))}
		for j := len(ids); j < len(ex.IDs); j++ {
			ex.Mask[j] = 1
		}
		convs, users = append(convs, ex), append(users, pairs[i][0])
	}
	if len(convs) < 8 {
		return nil, nil, 0, fmt.Errorf("demo: only %d usable conversations", len(convs))
	}
	return convs, users, genTok, nil
}

// greedyEach decodes every prompt greedily (up to o.GenTokens tokens,
// ending after stop) with m's KV cache on the CPU, one prompt at a time on
// each of o.Workers goroutines (2 when 0), and returns the responses in
// prompt order.
func greedyEach(ctx context.Context, m *model.Model, prompts [][]int32, o Options, stop int32, w io.Writer) ([][]int32, error) {
	outs := make([][]int32, len(prompts))
	var genTok atomic.Int64
	var done atomic.Int64
	var wg sync.WaitGroup
	workers := max(1, o.Workers)
	if o.Workers == 0 {
		workers = 2
	}
	gen := tensor.NewCPU[float32](1)
	jobs := make(chan int)
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				out, err := m.Generate(gen, prompts[i], model.GenerateOptions{MaxNewTokens: o.GenTokens, Stop: []int32{stop}})
				if err != nil {
					errs <- err
					return
				}
				outs[i] = out
				genTok.Add(int64(len(out)))
				n := done.Add(1)
				if o.Progress != "off" && (n%16 == 0 || int(n) == len(prompts)) {
					el := time.Since(start).Seconds()
					fmt.Fprintf(w, "\rgenerate %d/%d conversations, %d tokens, %.0f tok/s   ", n, len(prompts), genTok.Load(), float64(genTok.Load())/el)
				}
			}
		}()
	}
	for i := range prompts {
		select {
		case jobs <- i:
		case err := <-errs:
			close(jobs)
			wg.Wait()
			return nil, err
		case <-ctx.Done():
			close(jobs)
			wg.Wait()
			return nil, ctx.Err()
		}
	}
	close(jobs)
	wg.Wait()
	if o.Progress != "off" {
		fmt.Fprintln(w)
	}
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return outs, nil
}

// decodeHeldOut decodes the prompts of up to o.SpecPrompts held-out
// conversations (the tokens before the response) greedily with the drafter
// and with the target alone, up to o.GenTokens tokens each, as the
// conversations were generated.
func decodeHeldOut(ctx context.Context, target *model.Model, d *dflash.Drafter[float32], eval []dflash.Example, o Options, stop int32, b tensor.Backend[float32]) (*spec.Report, error) {
	prompts := spec.Prompts(eval[:min(len(eval), o.SpecPrompts)])
	sd, err := spec.NewDFlash(target, d, b)
	if err != nil {
		return nil, err
	}
	so := spec.Options{MaxNewTokens: o.GenTokens, Stop: []int32{stop}}
	if err := spec.Warm(ctx, b, target, sd, prompts[:1], so); err != nil {
		return nil, err
	}
	return spec.Run(ctx, b, target, sd, prompts, so, 1, true, nil)
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(max(1, len(v)))
}
