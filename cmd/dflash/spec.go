package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"dflash/data"
	"dflash/data/chat"
	"dflash/data/jsonl"
	"dflash/data/tokenizer"
	"dflash/internal/atomicfile"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/spec"
	"dflash/tensor"
	"dflash/train"
	"dflash/train/traincuda"
)

func init() {
	register(&command{
		name:    "spec",
		summary: "speculative decoding with a drafter: real acceptance length and speedup on prompts, lossless",
		run:     runSpec,
	})
}

const specHelp = `Decodes every prompt with the target and the drafter (speculative decoding:
the drafter proposes a block, the target verifies it in one pass) and again
with the target alone, on the same backend, and reports:

  acceptance length       tokens per target verification (accepted drafts + 1), mean and histogram
  acceptance per position fraction of rounds reaching draft s that accepted it, s = 1..B-1
  tokens/s                with and without the drafter, and the speedup

Prompts are the conversations of a messages / ShareGPT JSONL file (as for
train) without their final assistant message, rendered with the target's chat
template and the generation prompt. --batch N decodes N prompts at once (in
order; each row accepts and rolls back on its own, and prompt i samples with
seed+i whatever N): tokens/s, with the drafter and without (the target
alone decodes the same batches), count each batch's wall time. Greedy
decoding (temperature 0) is lossless: greedy_matches counts prompts whose
output equals the target's own.
--json prints one object: prompts, batch, block_size, max_new_tokens, temperature,
top_k, acceptance_length, acceptance_histogram (index n-1: rounds of length n),
acceptance_per_position (index s-1), rounds, speculative and baseline
({tokens, seconds, tokens_per_s}), speedup, greedy_matches, draft_seconds,
verify_seconds, target, drafter, prompts_file, device. --out writes one JSON
line per prompt: file, line, prompt, completion, tokens, baseline_tokens,
rounds, acceptance_length.
`

// specOptions are the flags of `dflash spec`, bound with train.BindOptions: every
// number is checked against its range when the flags are parsed, and --help shows it.
type specOptions struct {
	Target      string  `yaml:"target" help:"target model DIR (HF: config.json, safetensors, tokenizer.json, tokenizer_config.json)"`
	Drafter     string  `yaml:"drafter" help:"drafter DIR (config.json and model.safetensors, as train writes)"`
	Prompts     string  `yaml:"prompts" help:"conversations FILE (.jsonl, .gz, .zst)"`
	Format      string  `yaml:"format" choice:"auto,messages,sharegpt" help:"JSONL format"`
	MaxPrompts  int     `yaml:"max-prompts" range:">=0" help:"decode at most N prompts (0: all)"`
	MaxNew      int     `yaml:"max-new-tokens" range:">=1" help:"tokens generated per prompt at most"`
	Batch       int     `yaml:"batch" range:"[1,64]" help:"decode N prompts at once, each with its own acceptance (tokens/s over each batch's wall time)"`
	Temperature float64 `yaml:"temperature" range:">=0" help:"sampling temperature (0: greedy)"`
	TopK        int     `yaml:"top-k" range:">=0" help:"sample among the K most likely tokens (0: all)"`
	Seed        uint64  `yaml:"seed" range:">=0" help:"sampling seed (prompt i uses seed+i)"`
	Device      string  `yaml:"device" choice:"cpu,cuda" help:"backend: cpu, or cuda (the target and the drafter in bf16 on one GPU)"`
	GPU         int     `yaml:"gpu" range:">=0" help:"the GPU of --device cuda"`
	Workers     int     `yaml:"workers" range:">=0" help:"CPU goroutines (0: all cores)"`
	Baseline    bool    `yaml:"baseline" help:"also decode without the drafter, for tokens/s and the speedup"`
	Thinking    bool    `yaml:"enable-thinking" help:"render with enable_thinking (Qwen3)"`
	JSON        bool    `yaml:"json" help:"print the report as one JSON object"`
	Out         string  `yaml:"out" help:"write the generations to FILE (JSONL)"`
}

func defaultSpecOptions() specOptions {
	return specOptions{Format: "auto", MaxNew: 256, Batch: 1, Device: "cpu", Baseline: true}
}

// parseSpec reads and checks the flags of `dflash spec`.
func parseSpec(args []string) (specOptions, error) {
	fs := newFlagSet("spec", "spec --target DIR --drafter DIR --prompts FILE.jsonl [flags]")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: dflash spec --target DIR --drafter DIR --prompts FILE.jsonl [flags]\n\n%s\nFlags:\n", specHelp)
		fs.PrintDefaults()
	}
	o := defaultSpecOptions()
	if err := parseOptions(fs, train.BindOptions(fs, &o), args); err != nil {
		return o, err
	}
	if o.Target == "" || o.Drafter == "" || o.Prompts == "" {
		return o, fmt.Errorf("--target, --drafter and --prompts are required")
	}
	return o, nil
}

func runSpec(args []string) error {
	o, err := parseSpec(args)
	if err != nil {
		return err
	}
	return withSignals(func(ctx context.Context) error { return specDecode(ctx, o, os.Stdout) })
}

// specPrompt is one rendered prompt and where it came from.
type specPrompt struct {
	file string
	line int
	text string
	ids  []int32
}

func specDecode(ctx context.Context, o specOptions, stdout io.Writer) error {
	target, err := model.ReadConfig(filepath.Join(o.Target, "config.json"))
	if err != nil {
		return err
	}
	d, err := dflash.LoadDir[float32](o.Drafter)
	if err != nil {
		return err
	}
	tok, tmpl, err := chat.LoadModel(o.Target)
	if err != nil {
		return err
	}
	prompts, err := readSpecPrompts(o, target.ContextLimit(), tok, tmpl)
	if err != nil {
		return err
	}
	if o.Device == "cuda" {
		return specOnGPU(ctx, o, d, prompts, tok, stdout)
	}
	backend := tensor.NewCPU[float32](o.Workers)
	m, err := model.LoadOn(o.Target, backend)
	if err != nil {
		return err
	}
	return specRun(ctx, o, backend, m, d, prompts, tok, stdout)
}

// specOnGPU runs specRun on the worker thread of GPU o.GPU with its CUDA
// backend (kernels through the process's kernel cache), the target loaded
// onto it in bf16 and the drafter's parameters placed there, frozen.
func specOnGPU(ctx context.Context, o specOptions, d *dflash.Drafter[float32], prompts []specPrompt, tok *tokenizer.Tokenizer, stdout io.Writer) error {
	return traincuda.RunOne(ctx, o.GPU, "--gpu", func(r traincuda.RankEnv) error {
		m, err := model.LoadOn(o.Target, r.Backend)
		if err != nil {
			return err
		}
		d.Arena().Place(r.Backend, false)
		return specRun(ctx, o, r.Backend, m, d, prompts, tok, stdout)
	})
}

// specRun decodes the prompts on backend, where target and d live, and
// prints the report.
func specRun(ctx context.Context, o specOptions, backend tensor.Backend[float32], target *model.Model, d *dflash.Drafter[float32], prompts []specPrompt, tok *tokenizer.Tokenizer, stdout io.Writer) error {
	if err := spec.Check(target, d.Cfg); err != nil {
		return fmt.Errorf("--drafter %s, --target %s: %w", o.Drafter, o.Target, err)
	}
	drafter, err := spec.NewDFlash(target, d, backend)
	if err != nil {
		return err
	}
	ids := make([][]int32, len(prompts))
	for i, p := range prompts {
		ids[i] = p.ids
	}
	var stopIDs []int32
	for _, e := range target.Config.EOSTokenIDs {
		stopIDs = append(stopIDs, int32(e))
	}
	opts := spec.Options{MaxNewTokens: o.MaxNew, Temperature: o.Temperature, TopK: o.TopK, Seed: o.Seed, Stop: stopIDs}
	if err := spec.Warm(ctx, backend, target, drafter, ids[:min(o.Batch, len(ids))], opts); err != nil {
		return err
	}
	slog.Info("spec", "prompts", len(prompts), "batch", o.Batch, "block", d.Cfg.BlockSize, "max_new_tokens", o.MaxNew, "temperature", o.Temperature, "device", backend.Name())
	var r *spec.Report
	// decode runs the prompts, writing each generation to gen when not nil.
	decode := func(gen io.Writer) error {
		var enc *json.Encoder
		if gen != nil {
			enc = json.NewEncoder(gen)
		}
		each := func(g spec.Generation) error {
			if !o.JSON && len(prompts) > 1 {
				fmt.Fprintf(os.Stderr, "\rspec %d/%d prompts", g.Index+1, len(prompts))
			}
			if enc == nil {
				return nil
			}
			p := prompts[g.Index]
			return enc.Encode(map[string]any{"file": p.file, "line": p.line, "prompt": p.text,
				"completion": tok.Decode(g.Tokens, false), "tokens": g.Tokens, "baseline_tokens": g.Baseline,
				"rounds": g.Rounds, "acceptance_length": g.AcceptanceLength})
		}
		r, err = spec.Run(ctx, backend, target, drafter, ids, opts, o.Batch, o.Baseline, each)
		if g, ok := backend.(interface{ Replays() map[string]int }); ok { // CUDA graphs: how often each pass replayed
			slog.Info("spec graphs", "replays", g.Replays())
		}
		if !o.JSON && len(prompts) > 1 {
			fmt.Fprintln(os.Stderr)
		}
		return err
	}
	if o.Out == "" {
		err = decode(nil)
	} else {
		err = writeWhole(o.Out, len(prompts), decode)
	}
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSON(stdout, struct {
			*spec.Report
			Target      string `json:"target"`
			Drafter     string `json:"drafter"`
			PromptsFile string `json:"prompts_file"`
			Device      string `json:"device"`
		}{r, o.Target, o.Drafter, o.Prompts, o.Device})
	}
	printSpec(stdout, r)
	return nil
}

// readSpecPrompts reads and renders the prompts; every prompt longer than
// the context limit is reported with its file and line.
func readSpecPrompts(o specOptions, limit int, tok *tokenizer.Tokenizer, tmpl *chat.Template) ([]specPrompt, error) {
	f, err := jsonl.ParseFormat(o.Format)
	if err != nil {
		return nil, fmt.Errorf("--format: %w", err)
	}
	lines, err := jsonl.OpenLines([]string{o.Prompts})
	if err != nil {
		return nil, err
	}
	defer lines.Close()
	var out []specPrompt
	var long []string
	for o.MaxPrompts == 0 || len(out) < o.MaxPrompts {
		ln, err := lines.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		msgs, err := jsonl.Parse(ln, f)
		if err != nil {
			return nil, err
		}
		if n := len(msgs); n > 1 && msgs[n-1].Role == "assistant" {
			msgs = msgs[:n-1]
		}
		text, _, err := tmpl.Render(msgs, chat.Options{AddGenerationPrompt: true, EnableThinking: o.Thinking})
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", ln.File, ln.N, err)
		}
		ids := tok.Encode(text)
		if !data.FitsContext(len(ids), limit) {
			long = append(long, fmt.Sprintf("%s:%d: prompt of %d tokens", ln.File, ln.N, len(ids)))
			continue
		}
		out = append(out, specPrompt{file: ln.File, line: ln.N, text: text, ids: ids})
	}
	if len(long) > 0 {
		are := "prompts are"
		if len(long) == 1 {
			are = "prompt is"
		}
		return nil, fmt.Errorf("%d %s longer than the target's context limit of %d tokens (max_position_embeddings):\n  %s",
			len(long), are, limit, strings.Join(long, "\n  "))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no prompts", o.Prompts)
	}
	return out, nil
}

// writeWhole runs fill, which writes n JSON lines, with path as its writer,
// written whole or not at all (atomicfile: a temporary file beside path, renamed
// over it once complete and synced). When fill or a write fails (a full disk),
// path is as it was and the error says so, with the lines that were written.
func writeWhole(path string, n int, fill func(w io.Writer) error) error {
	var lines int
	err := atomicfile.Write(path, func(w io.Writer) error {
		return fill(lineCounter{w, &lines})
	})
	if err != nil {
		return fmt.Errorf("--out %s not written (it is replaced only when complete; %d of %d lines had been written): %w", path, lines, n, err)
	}
	return nil
}

// lineCounter counts the complete lines written through it.
type lineCounter struct {
	w     io.Writer
	lines *int
}

func (c lineCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	*c.lines += bytes.Count(p[:n], []byte("\n"))
	return n, err
}

func printSpec(w io.Writer, r *spec.Report) {
	fmt.Fprintf(w, "speculative decoding: %d prompts, batch %d, block %d, max %d new tokens, temperature %g, top-k %d\n\n",
		r.Prompts, r.Batch, r.BlockSize, r.MaxNewTokens, r.Temperature, r.TopK)
	fmt.Fprintf(w, "acceptance length   %.3f tokens per verification (%d verifications)\n", r.AcceptanceLength, r.Rounds)
	fmt.Fprintf(w, "histogram           ")
	for n, c := range r.Histogram {
		fmt.Fprintf(w, " %d:%d", n+1, c)
	}
	fmt.Fprintf(w, "\nper block position  ")
	for s, a := range r.PositionAcceptance {
		fmt.Fprintf(w, " %d:%.2f", s+1, a)
	}
	fmt.Fprintf(w, "\n\n%-20s %8s %9s %10s\n", "", "tokens", "seconds", "tokens/s")
	fmt.Fprintf(w, "%-20s %8d %9.2f %10.1f\n", "with the drafter", r.Speculative.Tokens, r.Speculative.Seconds, r.Speculative.TokensPerS)
	if b := r.Baseline; b != nil {
		fmt.Fprintf(w, "%-20s %8d %9.2f %10.1f\n", "target alone", b.Tokens, b.Seconds, b.TokensPerS)
		fmt.Fprintf(w, "\nspeedup %.2fx", r.Speedup)
		if r.Temperature <= 0 {
			fmt.Fprintf(w, "; %d of %d greedy outputs equal the target's own", r.GreedyMatches, r.Prompts)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "time with the drafter: drafting %.2fs, verification %.2fs, prefill and the rest %.2fs\n",
		r.DraftSeconds, r.VerifySeconds, r.Speculative.Seconds-r.DraftSeconds-r.VerifySeconds)
}
