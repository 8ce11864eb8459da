package data

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"dflash/data/chat"
	"dflash/data/jsonl"
	"dflash/data/shard"
	"dflash/data/tokenizer"
)

// Overflow says what happens to a sample longer than the maximum length.
type Overflow int

const (
	Truncate Overflow = iota // keep the first MaxLen tokens
	Drop                     // drop the sample
)

// Reasons a parsed conversation is dropped; they key Summary.Dropped.
const (
	DropTooLong      = "longer than max-len"
	DropFewTokens    = "fewer than 2 x block-size supervised tokens"
	ReasonTemplate   = "chat template failed"
	defaultBatchSize = 64
)

// PrepConfig configures Prep.
type PrepConfig struct {
	TokenizerDir   string       // model directory with tokenizer.json and tokenizer_config.json
	Files          []string     // JSONL inputs (plain, gzip or zstd)
	Out            string       // output directory (must not exist unless Force)
	Format         jsonl.Format // line format (Auto: per line)
	MaxLen         int          // maximum tokens per sample (0: no limit)
	Overflow       Overflow     // over MaxLen: Truncate or Drop
	BlockSize      int          // DFlash block size; samples need 2 x BlockSize supervised tokens
	EnableThinking bool         // Qwen3 thinking mode (see data/chat's mask rule)
	SkipBadLines   bool         // count and skip bad lines instead of failing
	Workers        int          // tokenizing goroutines (0: GOMAXPROCS)
	ShardTokens    int          // tokens per shard (0: shard.DefaultShardTokens)
	Force          bool         // replace an existing output directory
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
	Out        string         `json:"out"`
	Files      int            `json:"files"`
	Lines      int            `json:"lines"` // non-blank lines read
	Blank      int            `json:"blank_lines"`
	BadLines   map[string]int `json:"bad_lines"` // skipped, by reason
	Kept       int            `json:"kept"`
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

type job struct {
	seq   int
	lines []jsonl.Line
}

type result struct {
	ids        []int32
	mask       []uint8
	bad        *jsonl.LineError // bad line
	drop       string           // dropped, with this reason
	truncated  bool
	supervised int // tokens with mask 1
	crossing   int // tokens crossing into an assistant span (unmarked)
}

type done struct {
	seq     int
	results []result
}

// Prep runs the preprocessing pipeline (see the package doc).
func Prep(ctx context.Context, cfg PrepConfig) (Summary, error) {
	start := time.Now()
	if cfg.BlockSize <= 0 {
		return Summary{}, fmt.Errorf("data: block size must be positive, got %d", cfg.BlockSize)
	}
	if cfg.MaxLen < 0 {
		return Summary{}, fmt.Errorf("data: max length must not be negative, got %d", cfg.MaxLen)
	}
	if cfg.MaxLen > 0 && cfg.MaxLen < 2*cfg.BlockSize {
		return Summary{}, fmt.Errorf("data: max length %d leaves no room for 2 x block size %d supervised tokens", cfg.MaxLen, cfg.BlockSize)
	}
	tok, tmpl := cfg.Tokenizer, cfg.Template
	var err error
	if tok == nil {
		if tok, err = tokenizer.LoadDir(cfg.TokenizerDir); err != nil {
			return Summary{}, err
		}
	}
	if tmpl == nil {
		if tmpl, err = chat.Load(cfg.TokenizerDir, tok); err != nil {
			return Summary{}, err
		}
	}
	lines, err := jsonl.OpenLines(cfg.Files)
	if err != nil {
		return Summary{}, err
	}
	defer lines.Close()
	w, err := shard.Create(cfg.Out, cfg.ShardTokens, cfg.Force)
	if err != nil {
		return Summary{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	jobs := make(chan job, 2*workers)
	results := make(chan done, 2*workers)
	readErr := make(chan error, 1)
	readerDone := make(chan struct{})
	go func() { // reader: lines in batches, in order
		defer close(readerDone)
		defer close(jobs)
		seq := 0
		batch := make([]jsonl.Line, 0, defaultBatchSize)
		send := func() bool {
			select {
			case jobs <- job{seq, batch}:
				seq++
				batch = make([]jsonl.Line, 0, defaultBatchSize)
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			ln, err := lines.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				readErr <- err
				return
			}
			ln.Text = append([]byte(nil), ln.Text...)
			batch = append(batch, ln)
			if len(batch) == defaultBatchSize && !send() {
				return
			}
		}
		if len(batch) > 0 {
			send()
		}
		readErr <- nil
	}()
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				out := make([]result, len(j.lines))
				for k, ln := range j.lines {
					out[k] = process(tok, tmpl, &cfg, ln)
				}
				select {
				case results <- done{j.seq, out}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(results) }()

	sum := Summary{Out: cfg.Out, BadLines: map[string]int{}, Dropped: map[string]int{}}
	total := jsonl.TotalBytes(cfg.Files)
	pending := map[int][]result{}
	next := 0
	lastProgress := time.Now()
	fail := func(err error) (Summary, error) {
		cancel()
		for range results { // let the workers finish
		}
		<-readerDone // before the deferred lines.Close
		w.Abort()
		return sum, err
	}
	for d := range results {
		pending[d.seq] = d.results
		for {
			rs, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			for _, r := range rs {
				sum.Lines++
				switch {
				case r.bad != nil:
					if !cfg.SkipBadLines {
						return fail(fmt.Errorf("%w (use --skip-bad-lines to skip bad lines)", r.bad))
					}
					sum.BadLines[r.bad.Reason]++
				case r.drop != "":
					sum.Dropped[r.drop]++
				default:
					if err := w.Add(r.ids, r.mask); err != nil {
						return fail(err)
					}
					sum.Kept++
					sum.Tokens += int64(len(r.ids))
					sum.Supervised += int64(r.supervised)
					sum.MaxLen = max(sum.MaxLen, len(r.ids))
					if r.truncated {
						sum.Truncated++
					}
					sum.Crossing += r.crossing
				}
			}
		}
		if cfg.Progress != nil && time.Since(lastProgress) >= 100*time.Millisecond {
			lastProgress = time.Now()
			cfg.Progress(Progress{BytesRead: lines.BytesRead(), BytesTotal: total, Lines: sum.Lines, Kept: sum.Kept, Elapsed: time.Since(start)})
		}
	}
	<-readerDone
	if err := ctx.Err(); err != nil { // interrupted
		w.Abort()
		return sum, err
	}
	if err := <-readErr; err != nil {
		w.Abort()
		return sum, err
	}
	sum.Files, sum.Blank = lines.Files(), lines.Blank()
	if cfg.Progress != nil {
		cfg.Progress(Progress{BytesRead: lines.BytesRead(), BytesTotal: total, Lines: sum.Lines, Kept: sum.Kept, Elapsed: time.Since(start)})
	}
	tsum := sha256.Sum256([]byte(tmpl.Source()))
	overflow := "truncate"
	if cfg.Overflow == Drop {
		overflow = "drop"
	}
	info := Info{Tokenizer: cfg.TokenizerDir, TokenizerHash: tok.Hash(), TemplateHash: hex.EncodeToString(tsum[:]),
		TemplateFamily: tmpl.Family(), MaxLen: cfg.MaxLen, Overflow: overflow, BlockSize: cfg.BlockSize,
		EnableThinking: cfg.EnableThinking, Created: time.Now().UTC().Format(time.RFC3339)}
	if err := w.Flush(); err != nil {
		w.Abort()
		return sum, err
	}
	sum.Shards = w.Shards()
	sum.Seconds = time.Since(start).Seconds()
	info.Summary = sum
	if _, err := w.Finish(info); err != nil {
		return sum, err
	}
	return sum, nil
}

// process turns one line into a sample, a drop or a bad line.
func process(tok *tokenizer.Tokenizer, tmpl *chat.Template, cfg *PrepConfig, ln jsonl.Line) result {
	var r result
	msgs, err := jsonl.Parse(ln, cfg.Format)
	if err != nil {
		var le *jsonl.LineError
		if !errors.As(err, &le) {
			le = &jsonl.LineError{File: ln.File, Line: ln.N, Reason: jsonl.ReasonJSON, Detail: err.Error()}
		}
		r.bad = le
		return r
	}
	enc, err := tmpl.EncodeSample(tok, msgs, chat.Options{EnableThinking: cfg.EnableThinking})
	if err != nil {
		r.bad = &jsonl.LineError{File: ln.File, Line: ln.N, Reason: ReasonTemplate, Detail: err.Error()}
		return r
	}
	ids, mask := enc.IDs, enc.Mask
	r.crossing = enc.Crossing
	if cfg.MaxLen > 0 && len(ids) > cfg.MaxLen {
		if cfg.Overflow == Drop {
			r.drop = DropTooLong
			return r
		}
		ids, mask, r.truncated = ids[:cfg.MaxLen], mask[:cfg.MaxLen], true
	}
	n := 0
	for _, m := range mask {
		n += int(m)
	}
	if n < 2*cfg.BlockSize {
		r.drop = DropFewTokens
		return r
	}
	r.ids, r.mask, r.supervised = ids, mask, n
	return r
}
