package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"

	"dflash/data"
	"dflash/data/chat"
	"dflash/data/jsonl"
	"dflash/data/tokenizer"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/spec"
	"dflash/tensor"
	"dflash/train"
)

// trainConfig is the YAML (and flag) configuration of `dflash train`.
type trainConfig struct {
	train.Config `yaml:",inline"`
	Drafter      drafterOptions `yaml:"drafter"`
	Data         dataOptions    `yaml:"data"`
}

type drafterOptions struct {
	Layers       int     `yaml:"layers" help:"drafter decoder layers"`
	Taps         []int   `yaml:"taps" help:"target layers to tap, 0-based (empty: spread evenly from 1 to L-3, one per drafter layer)"`
	BlockSize    int     `yaml:"block_size" help:"draft block size B"`
	MaskTokenID  int     `yaml:"mask_token_id" help:"mask token id (-1: the tokenizer's <|MASK|>, else the first id past the tokenizer's vocabulary)"`
	Gamma        float64 `yaml:"gamma" help:"loss decay gamma (0: the default for the block size)"`
	Anchors      int     `yaml:"anchors" help:"anchors sampled per sequence and step"`
	Intermediate int     `yaml:"intermediate_size" help:"drafter MLP width (0: the target's)"`
	Export       string  `yaml:"export" help:"dtype of the exported drafter in OUT/drafter: F32 or BF16"`
}

type dataOptions struct {
	Format       string  `yaml:"format" help:"JSONL format: auto, messages or sharegpt"`
	SkipBadLines bool    `yaml:"skip_bad_lines" help:"count and skip malformed lines instead of failing"`
	MaxLen       int     `yaml:"max_len" help:"truncate conversations to this many tokens"`
	BatchSize    int     `yaml:"batch_size" help:"sequences per micro-batch"`
	EvalFraction float64 `yaml:"eval_fraction" help:"fraction of conversations held out for evaluation"`
	EvalMax      int     `yaml:"eval_max" help:"at most this many held-out conversations"`
	Thinking     bool    `yaml:"enable_thinking" help:"render with enable_thinking (Qwen3)"`
	CacheHidden  bool    `yaml:"cache_hidden" help:"keep target hidden states in memory after first use (small data sets)"`
}

func defaultTrainConfig() trainConfig {
	c := trainConfig{Config: train.DefaultConfig()}
	c.EvalEvery = 100
	c.Drafter = drafterOptions{Layers: 1, BlockSize: 16, MaskTokenID: -1, Anchors: 512, Export: "BF16"}
	c.Data = dataOptions{Format: "auto", MaxLen: 2048, BatchSize: 4, EvalFraction: 0.05, EvalMax: 256}
	return c
}

func init() {
	register(&command{
		name:    "train",
		summary: "train a DFlash drafter for a target model on conversations",
		run:     runTrain,
	})
}

func runTrain(args []string) error {
	fs := newFlagSet("train", "train --target DIR --data DIR|FILE --out DIR [--config FILE.yaml] [flags]")
	targetDir := fs.String("target", "", "target model `DIR` (HF: config.json, safetensors, tokenizer.json, tokenizer_config.json)")
	dataArg := fs.String("data", "", "conversations: a JSONL `FILE` (.jsonl, .gz, .zst) or a DIR of them")
	configPath := fs.String("config", "", "YAML `FILE` with any of the flags below (flags override it; unknown keys are errors)")
	workers := fs.Int("workers", 0, "CPU goroutines (0: all cores)")
	cfg := defaultTrainConfig()
	flags := train.BindFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *configPath != "" {
		if err := train.LoadYAML(*configPath, &cfg); err != nil {
			return err
		}
	}
	flags.Apply()
	if *targetDir == "" || *dataArg == "" {
		fs.Usage()
		return fmt.Errorf("--target and --data are required")
	}
	if err := cfg.Config.Validate(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return trainDrafter(ctx, *targetDir, *dataArg, cfg, *workers)
}

func trainDrafter(ctx context.Context, targetDir, dataArg string, cfg trainConfig, workers int) error {
	target, err := model.Load(targetDir)
	if err != nil {
		return err
	}
	tok, err := tokenizer.LoadDir(targetDir)
	if err != nil {
		return err
	}
	tmpl, err := chat.Load(targetDir, tok)
	if err != nil {
		return err
	}
	mask, err := maskToken(cfg.Drafter.MaskTokenID, tok, target.Config.VocabSize)
	if err != nil {
		return err
	}
	examples, err := readConversations(dataArg, cfg.Data, tok, tmpl)
	if err != nil {
		return err
	}
	if len(examples) < 2 {
		return fmt.Errorf("%s: %d usable conversations, need at least 2", dataArg, len(examples))
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, train.StreamData))
	rng.Shuffle(len(examples), func(i, j int) { examples[i], examples[j] = examples[j], examples[i] })
	nEval := min(cfg.Data.EvalMax, max(1, int(float64(len(examples))*cfg.Data.EvalFraction)))

	dc := dflash.DrafterConfigFor(target, cfg.Drafter.Layers, cfg.Drafter.Taps, cfg.Drafter.BlockSize, mask)
	if cfg.Drafter.Gamma != 0 {
		dc.Gamma = cfg.Drafter.Gamma
	}
	if cfg.Drafter.Intermediate > 0 {
		dc.IntermediateSize = cfg.Drafter.Intermediate
	}
	dc.NumAnchors = cfg.Drafter.Anchors
	if err := dc.Validate(); err != nil {
		return fmt.Errorf("drafter config: %w", err)
	}
	backend := tensor.NewCPU[float32](workers)
	drafter := dflash.New[float32](dc, rand.New(rand.NewPCG(cfg.Seed, train.StreamInit)))
	pad := int32(0)
	if id, ok := tok.TokenID("<|endoftext|>"); ok {
		pad = id
	}
	sess := &dflash.Session{Drafter: drafter, Head: dflash.HeadOf(target),
		Hidden: dflash.TargetHidden(target, dc.TargetLayerIDs, backend), Backend: backend,
		Train: examples[nEval:], Eval: examples[:nEval], BatchSize: cfg.Data.BatchSize, Pad: pad,
		Seed: cfg.Seed, CacheHidden: cfg.Data.CacheHidden}
	if cfg.SpecEvalEvery > 0 {
		if sess.SpecEval, err = spec.EvalFunc(backend, target, drafter, sess.Eval, cfg.SpecPrompts, cfg.SpecMaxNewTokens); err != nil {
			return err
		}
	}
	slog.Info("drafter", "layers", dc.NumLayers, "taps", dc.TargetLayerIDs, "block", dc.BlockSize,
		"mask", dc.MaskTokenID, "gamma", dc.Gamma, "train", len(sess.Train), "eval", len(sess.Eval))
	res, err := train.Run(ctx, cfg.Config, sess.Hooks())
	if err != nil {
		return err
	}
	out := filepath.Join(cfg.Out, "drafter")
	if err := drafter.WriteDir(out, cfg.Drafter.Export); err != nil {
		return err
	}
	fmt.Printf("trained %d steps (%d tokens) in %s; drafter written to %s\n", res.Steps, res.Tokens, res.Elapsed.Round(1e9), out)
	for _, k := range slices.Sorted(maps.Keys(res.LastEval)) {
		fmt.Printf("  eval %-8s %.4f\n", k, res.LastEval[k])
	}
	return nil
}

// maskToken chooses the mask token: id when >= 0, else the tokenizer's
// <|MASK|>, else the first id past the tokenizer's vocabulary when the
// target's embedding has that row (as adding a special token does).
func maskToken(id int, tok *tokenizer.Tokenizer, vocab int) (int, error) {
	if id >= 0 {
		if id >= vocab {
			return 0, fmt.Errorf("drafter.mask_token_id %d is outside the target's vocabulary %d", id, vocab)
		}
		return id, nil
	}
	if t, ok := tok.TokenID("<|MASK|>"); ok {
		return int(t), nil
	}
	if n := tok.VocabSize(); n < vocab {
		return n, nil
	}
	return 0, fmt.Errorf("the tokenizer has no <|MASK|> token and the embedding no spare row: set drafter.mask_token_id")
}

// readConversations reads a directory prepared by `dflash data prep`, or
// JSONL conversations (a file or every *.jsonl, *.jsonl.gz, *.jsonl.zst in a
// directory) rendered with the chat template into ids and assistant-only
// masks.
func readConversations(arg string, o dataOptions, tok *tokenizer.Tokenizer, tmpl *chat.Template) ([]dflash.Example, error) {
	paths := []string{arg}
	if st, err := os.Stat(arg); err != nil {
		return nil, err
	} else if st.IsDir() {
		if _, err := os.Stat(filepath.Join(arg, "meta.json")); err == nil {
			return readPrepared(arg, o)
		}
		paths = nil
		entries, err := os.ReadDir(arg)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			n := e.Name()
			if !e.IsDir() && (strings.HasSuffix(n, ".jsonl") || strings.HasSuffix(n, ".jsonl.gz") || strings.HasSuffix(n, ".jsonl.zst")) {
				paths = append(paths, filepath.Join(arg, n))
			}
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("%s: no .jsonl, .jsonl.gz or .jsonl.zst files", arg)
		}
	}
	f, err := jsonl.ParseFormat(o.Format)
	if err != nil {
		return nil, fmt.Errorf("data.format: %w", err)
	}
	r, err := jsonl.Open(paths, f, o.SkipBadLines)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []dflash.Example
	dropped := map[string]int{}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		ids, mask, err := tmpl.Encode(tok, rec.Messages, chat.Options{EnableThinking: o.Thinking})
		if err != nil {
			dropped["render: "+err.Error()]++
			continue
		}
		if len(ids) > o.MaxLen {
			ids, mask = ids[:o.MaxLen], mask[:o.MaxLen]
		}
		if len(dflash.Candidates(mask, len(ids))) == 0 {
			dropped["no two consecutive assistant tokens"]++
			continue
		}
		out = append(out, dflash.Example{IDs: ids, Mask: mask})
	}
	st := r.Stats()
	slog.Info("data", "files", len(paths), "kept", len(out), "bad_lines", st.BadTotal(), "dropped", dropped)
	return out, nil
}

// readPrepared reads every sample of a `dflash data prep` directory.
func readPrepared(dir string, o dataOptions) ([]dflash.Example, error) {
	ds, err := data.Open(dir)
	if err != nil {
		return nil, err
	}
	defer ds.Close()
	var out []dflash.Example
	dropped := 0
	for i := 0; i < ds.Len(); i++ {
		ids, mask := ds.Sample(i)
		if len(ids) > o.MaxLen {
			ids, mask = ids[:o.MaxLen], mask[:o.MaxLen]
		}
		if len(dflash.Candidates(mask, len(ids))) == 0 {
			dropped++
			continue
		}
		out = append(out, dflash.Example{IDs: slices.Clone(ids), Mask: slices.Clone(mask)})
	}
	slog.Info("data", "prepared", dir, "kept", len(out), "dropped", dropped)
	return out, nil
}
