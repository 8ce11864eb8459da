package data

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"dflash/data/chat"
	"dflash/data/shard"
	"dflash/data/tokenizer"
)

// Reasons a parsed conversation is dropped; they key Summary.Dropped.
const (
	DropTooLong      = "longer than max-len or the target's context"
	DropFewTokens    = "fewer than 2 x block-size supervised tokens"
	ReasonTemplate   = "chat template failed"
	defaultBatchSize = 64
)

// PrepConfig configures Prep.
type PrepConfig struct {
	Options               // the sample rules, shared with train
	TokenizerDir string   // model directory with tokenizer.json and tokenizer_config.json
	Files        []string // JSONL inputs (plain, gzip or zstd)
	Out          string   // output directory (must not exist unless Force)
	Workers      int      // tokenizing goroutines (0: GOMAXPROCS)
	ShardTokens  int      // tokens per shard (0: shard.DefaultShardTokens)
	Force        bool     // replace an existing output directory
	// Progress, when set, is called from Prep's goroutine about every 100 ms.
	Progress func(Progress)
	// Tokenizer and Template, when set, are used instead of loading them
	// from TokenizerDir.
	Tokenizer *tokenizer.Tokenizer
	Template  *chat.Template
}

// Progress is a snapshot of a running Prep.
type Progress struct {
	BytesRead, BytesTotal int64 // input bytes as stored (compressed)
	Lines, Kept           int
	Elapsed               time.Duration
}

// Summary is the outcome of Prep.
type Summary struct {
	Out      string                    `json:"out"`
	Files    int                       `json:"files"`
	Lines    int                       `json:"lines"` // non-blank lines read
	Blank    int                       `json:"blank_lines"`
	BadLines map[string]int            `json:"bad_lines"`         // skipped, by reason
	BadFiles map[string]map[string]int `json:"bad_lines_by_file"` // skipped, by file and reason
	Kept     int                       `json:"kept"`
	// Truncated counts kept samples cut to MaxLen.
	Truncated  int            `json:"truncated"`
	Dropped    map[string]int `json:"dropped"` // by reason
	Tokens     int64          `json:"tokens"`
	Supervised int64          `json:"supervised_tokens"`
	MaxLen     int            `json:"longest"` // longest kept sample
	// Crossing counts tokens, in kept samples, that start in a template
	// header and end in assistant text (not supervised; see data/chat).
	Crossing int     `json:"crossing_tokens"`
	Shards   int     `json:"shards"`
	Seconds  float64 `json:"seconds"`
}

// add counts the inputs of s in sum too (Load's several inputs).
func (sum *Summary) add(s Summary) {
	sum.Files += s.Files
	sum.Lines += s.Lines
	sum.Blank += s.Blank
	sum.Kept += s.Kept
	sum.Truncated += s.Truncated
	sum.Tokens += s.Tokens
	sum.Supervised += s.Supervised
	sum.MaxLen = max(sum.MaxLen, s.MaxLen)
	sum.Crossing += s.Crossing
	sum.Shards += s.Shards
	sum.Seconds += s.Seconds
	addCounts(&sum.BadLines, s.BadLines)
	addCounts(&sum.Dropped, s.Dropped)
	for f, m := range s.BadFiles {
		if sum.BadFiles == nil {
			sum.BadFiles = map[string]map[string]int{}
		}
		c := sum.BadFiles[f]
		addCounts(&c, m)
		sum.BadFiles[f] = c
	}
}

// addCounts adds the counts of src to *dst, making it when needed.
func addCounts(dst *map[string]int, src map[string]int) {
	for k, v := range src {
		if *dst == nil {
			*dst = map[string]int{}
		}
		(*dst)[k] += v
	}
}

// Info is what Prep records in meta.json's "info".
type Info struct {
	Tokenizer      string  `json:"tokenizer_dir"`
	TokenizerHash  string  `json:"tokenizer_sha256"`
	TemplateHash   string  `json:"chat_template_sha256"`
	TemplateFamily string  `json:"chat_template_family"`
	MaxLen         int     `json:"max_len"`
	Overflow       string  `json:"overflow"`
	BlockSize      int     `json:"block_size"`
	EnableThinking bool    `json:"enable_thinking"`
	Created        string  `json:"created"`
	Summary        Summary `json:"summary"`
}

// Prep runs the preprocessing pipeline (see Options and the package doc)
// in three phases: load the tokenizer and template, tokenize the files into
// a shard writer, and place the dataset with its meta.json.
func Prep(ctx context.Context, cfg PrepConfig) (Summary, error) {
	start := time.Now()
	p, err := newPipeline(cfg.Options, cfg.TokenizerDir, cfg.Tokenizer, cfg.Template)
	if err != nil {
		return Summary{}, err
	}
	p.files, p.workers, p.progress, p.skipFlag = cfg.Files, cfg.Workers, cfg.Progress, "--skip-bad-lines"
	w, err := shard.Create(cfg.Out, cfg.ShardTokens, cfg.Force)
	if err != nil {
		return Summary{}, err
	}
	sum, err := p.run(ctx, w.Add)
	sum.Out = cfg.Out
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		w.Abort()
		return sum, err
	}
	sum.Shards = w.Shards()
	sum.Seconds = time.Since(start).Seconds()
	if _, err := w.Finish(p.info(cfg.TokenizerDir, sum)); err != nil {
		return sum, err
	}
	return sum, nil
}

// newPipeline checks opts and loads the tokenizer and template from dir
// unless given.
func newPipeline(opts Options, dir string, tok *tokenizer.Tokenizer, tmpl *chat.Template) (*pipeline, error) {
	format, err := opts.Validate()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		if tok, err = tokenizer.LoadDir(dir); err != nil {
			return nil, err
		}
	}
	if tmpl == nil {
		if tmpl, err = chat.Load(dir, tok); err != nil {
			return nil, err
		}
	}
	return &pipeline{opts: opts, format: format, tok: tok, tmpl: tmpl}, nil
}

// info is the record of a run for meta.json.
func (p *pipeline) info(dir string, sum Summary) Info {
	tsum := sha256.Sum256([]byte(p.tmpl.Source()))
	return Info{Tokenizer: dir, TokenizerHash: p.tok.Hash(), TemplateHash: hex.EncodeToString(tsum[:]),
		TemplateFamily: p.tmpl.Family(), MaxLen: p.opts.MaxLen, Overflow: p.opts.overflowName(),
		BlockSize: p.opts.BlockSize, EnableThinking: p.opts.EnableThinking,
		Created: time.Now().UTC().Format(time.RFC3339), Summary: sum}
}
