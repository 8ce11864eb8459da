package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"dflash/data"
	"dflash/data/bucket"
	"dflash/data/pack"
	"dflash/data/tokenizer"
	"dflash/internal/dirlock"
	"dflash/internal/termbar"
	"dflash/train"
)

func init() {
	subs := map[string]*command{
		"prep":     {name: "prep", summary: "tokenize and mask JSONL conversations into training shards", run: dataPrep},
		"stats":    {name: "stats", summary: "describe a prepared directory: lengths, buckets, padding waste", run: dataStats},
		"show":     {name: "show", summary: "print prepared samples with their supervised tokens marked", run: dataShow},
		"tokenize": {name: "tokenize", summary: "encode text (or decode ids) with a tokenizer.json", run: dataTokenize},
	}
	register(&command{name: "data", summary: "prepare training data: prep, stats, show, tokenize",
		run: func(args []string) error { return subcommands("data", subs, args) }})
}

// prepOptions are the flags of `dflash data prep`, bound with train.BindOptions:
// every number is checked against its range when the flags are parsed, and --help
// shows it. The sample rules are data.Options, as train's --data.* options.
type prepOptions struct {
	Tokenizer    string `yaml:"tokenizer" help:"model directory with tokenizer.json and tokenizer_config.json (required)"`
	Out          string `yaml:"out" help:"output directory, written atomically (required)"`
	data.Options `yaml:",inline"`
	Truncate     bool `yaml:"truncate" help:"truncate samples longer than --max-len (the default)"`
	Block        int  `yaml:"block-size" range:">=1" help:"DFlash block size; samples need 2 x block-size supervised tokens"`
	Workers      int  `yaml:"workers" range:">=0" help:"tokenizing goroutines (0: all cores)"`
	ShardTokens  int  `yaml:"shard-tokens" range:">=0" help:"tokens per shard file (0: 64Mi)"`
	Force        bool `yaml:"force" help:"replace --out if it exists"`
	JSON         bool `yaml:"json" help:"print the summary as one JSON object"`
}

// parsePrep reads and checks the flags of `dflash data prep`; nothing is written.
func parsePrep(args []string) (prepOptions, []string, error) {
	fs := newFlagSet("data prep", "data prep --tokenizer DIR --data FILE [FILE...] --out DIR [flags]")
	def := data.DefaultOptions()
	o := prepOptions{Options: def, Block: def.BlockSize}
	var files pathList
	fs.Var(&files, "data", "JSONL `FILE`s, plain, gzip or zstd: several after one --data, or --data repeated (extra arguments are inputs too)")
	var thinking *bool
	fs.BoolFunc("thinking", "older spelling of --enable-thinking", func(s string) error {
		v, err := strconv.ParseBool(s)
		thinking = &v
		return err
	})
	opts := train.BindOptions(fs, &o)
	if err := parseOptionArgs(fs, opts, args); err != nil {
		return o, nil, err
	}
	files = append(files, fs.Args()...)
	switch {
	case thinking != nil && opts.Given("enable-thinking") && *thinking != o.EnableThinking:
		return o, nil, errors.New("--thinking and --enable-thinking disagree (--thinking is the older spelling: give one)")
	case o.Tokenizer == "":
		return o, nil, errors.New("--tokenizer is required")
	case o.Out == "":
		return o, nil, errors.New("--out is required")
	case len(files) == 0:
		return o, nil, errors.New("no input: give --data FILE")
	case o.Truncate && o.DropLong:
		return o, nil, errors.New("--truncate and --drop-long exclude each other")
	}
	if thinking != nil {
		o.EnableThinking = *thinking
	}
	o.Options.BlockSize = o.Block
	if _, err := o.Options.Validate(); err != nil {
		return o, nil, usageError(fmt.Errorf("--max-len %d, --block-size %d: %w", o.MaxLen, o.Block, err))
	}
	return o, files, nil
}

func dataPrep(args []string) error {
	o, files, err := parsePrep(args)
	if err != nil {
		return err
	}
	ctx, caught, stop := signalContext()
	defer stop()
	lock, err := dirlock.Acquire(o.Out, "dflash data prep")
	if err != nil {
		return err
	}
	defer lock.Release()
	bar := newDataBar(os.Stderr)
	sum, err := data.Prep(ctx, data.PrepConfig{
		Options: o.Options, TokenizerDir: o.Tokenizer, Files: files, Out: o.Out, Workers: o.Workers,
		ShardTokens: o.ShardTokens, Force: o.Force, Progress: bar.update,
	})
	bar.finish()
	if sig := caught(); err != nil && sig != nil {
		return &exitError{code: signalStatus(sig), err: fmt.Errorf("interrupted by %s: nothing written (%s is as it was before)", signalName(sig), o.Out)}
	}
	if err != nil {
		return err
	}
	if o.JSON {
		return json.NewEncoder(os.Stdout).Encode(sum)
	}
	printPrepSummary(os.Stdout, sum)
	return nil
}

func printPrepSummary(w io.Writer, s data.Summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "output\t%s (%d shard%s)\n", s.Out, s.Shards, plural(s.Shards))
	fmt.Fprintf(tw, "files\t%d\n", s.Files)
	fmt.Fprintf(tw, "lines read\t%d (and %d blank)\n", s.Lines, s.Blank)
	fmt.Fprintf(tw, "kept\t%d samples, %d tokens, %d supervised (%.1f%%), longest %d\n",
		s.Kept, s.Tokens, s.Supervised, 100*float64(s.Supervised)/float64(max(s.Tokens, 1)), s.MaxLen)
	fmt.Fprintf(tw, "truncated\t%d\n", s.Truncated)
	if s.Crossing > 0 {
		fmt.Fprintf(tw, "header tokens reaching into assistant text\t%d (not supervised)\n", s.Crossing)
	}
	printReasons(tw, "bad lines skipped", s.BadLines)
	for _, f := range slices.Sorted(maps.Keys(s.BadFiles)) {
		printReasons(tw, "  in "+f, s.BadFiles[f])
	}
	printReasons(tw, "dropped", s.Dropped)
	fmt.Fprintf(tw, "time\t%.2f s\n", s.Seconds)
	tw.Flush()
}

func printReasons(w io.Writer, what string, m map[string]int) {
	total := 0
	keys := make([]string, 0, len(m))
	for k, v := range m {
		total += v
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "%s\t%d\n", what, total)
	for _, k := range keys {
		fmt.Fprintf(w, "\t  %d %s\n", m[k], k)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// dataBar draws a progress bar on a terminal, or a line every few seconds
// elsewhere.
type dataBar struct {
	w     *os.File
	tty   bool
	last  time.Time
	drawn bool
}

func newDataBar(w *os.File) *dataBar {
	return &dataBar{w: w, tty: termbar.IsTerminal(w), last: time.Now()}
}

func (b *dataBar) update(p data.Progress) {
	frac := 0.0
	if p.BytesTotal > 0 {
		frac = min(1, float64(p.BytesRead)/float64(p.BytesTotal))
	}
	rate := float64(p.BytesRead) / 1e6 / max(p.Elapsed.Seconds(), 1e-9)
	if b.tty {
		fmt.Fprintf(b.w, "\r%s %5.1f%%  %d lines  %d kept  %.1f MB/s  %s\x1b[K",
			termbar.Bar(frac, 30), 100*frac, p.Lines, p.Kept, rate, p.Elapsed.Round(time.Second))
		b.drawn = true
		return
	}
	if time.Since(b.last) >= 5*time.Second {
		b.last = time.Now()
		fmt.Fprintf(b.w, "data prep: %.1f%% read, %d lines, %d kept, %.1f MB/s\n", 100*frac, p.Lines, p.Kept, rate)
	}
}

func (b *dataBar) finish() {
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}

// statsFlags are the flags of `dflash data stats`, bound with train.BindOptions.
type statsFlags struct {
	Edge    int  `yaml:"edge" range:">=1" help:"bucket granularity (the attention block)"`
	Budget  int  `yaml:"budget" range:">=1" help:"padded tokens per batch"`
	Buckets int  `yaml:"buckets" range:">=0" help:"at most this many bucket lengths, chosen to pad least (0: one per multiple of --edge)"`
	PackLen int  `yaml:"pack-len" range:">=0" help:"tokens per packed row (0: the longest sample, rounded up to --edge)"`
	Rows    int  `yaml:"rows" range:">=1" help:"packed rows per batch (train's --data.batch-size)"`
	Verify  bool `yaml:"verify" help:"recompute every shard's checksum"`
	JSON    bool `yaml:"json" help:"print one JSON object"`
}

func dataStats(args []string) error {
	fs := newFlagSet("data stats", "data stats [flags] DIR")
	f := statsFlags{Edge: bucket.DefaultEdge, Budget: 16384, Rows: 4}
	if err := parseOptionArgs(fs, train.BindOptions(fs, &f), args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError(errors.New("want one prepared directory"))
	}
	d, err := data.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer d.Close()
	if f.Verify {
		if err := d.Verify(); err != nil {
			return err
		}
	}
	meta := d.Meta()
	lengths := d.Lengths()
	sorted := append([]int(nil), lengths...)
	sort.Ints(sorted)
	pct := func(p float64) int {
		if len(sorted) == 0 {
			return 0
		}
		return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
	}
	type statsOut struct {
		Dir        string         `json:"dir"`
		Samples    int64          `json:"samples"`
		Tokens     int64          `json:"tokens"`
		Supervised int64          `json:"supervised_tokens"`
		Shards     int            `json:"shards"`
		Lengths    map[string]int `json:"lengths"`
		Buckets    *bucket.Report `json:"buckets,omitempty"`
		Packed     *pack.Report   `json:"packed,omitempty"`
		Verified   bool           `json:"verified"`
	}
	st := statsOut{Dir: fs.Arg(0), Samples: meta.Samples, Tokens: meta.Tokens, Supervised: meta.Supervised,
		Shards: len(meta.Shards), Verified: f.Verify,
		Lengths: map[string]int{"min": pct(0), "p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99), "max": pct(1)}}
	if len(lengths) > 0 {
		s, err := bucket.New(lengths, bucket.Config{Edge: f.Edge, TokenBudget: f.Budget, MaxBuckets: f.Buckets})
		if err != nil {
			return err
		}
		r := s.Report()
		st.Buckets = &r
		rowLen := f.PackLen
		if rowLen == 0 {
			rowLen = bucket.RoundUp(pct(1), f.Edge)
		}
		p, err := pack.New(lengths, pack.Config{RowLen: rowLen, Rows: f.Rows})
		if err != nil {
			return fmt.Errorf("--pack-len %d: %w", f.PackLen, err)
		}
		pr := p.Report()
		st.Packed = &pr
	}
	if f.JSON {
		return json.NewEncoder(os.Stdout).Encode(st)
	}
	fmt.Printf("%s: %d samples in %d shard%s, %d tokens, %d supervised (%.1f%%)\n", st.Dir, st.Samples, st.Shards, plural(st.Shards),
		st.Tokens, st.Supervised, 100*float64(st.Supervised)/float64(max(st.Tokens, 1)))
	fmt.Printf("lengths: min %d, median %d, p90 %d, p99 %d, max %d\n", pct(0), pct(0.5), pct(0.9), pct(0.99), pct(1))
	if f.Verify {
		fmt.Println("checksums: ok")
	}
	if st.Buckets != nil {
		fmt.Printf("\n%d buckets (edge %d, budget %d tokens per batch):\n", len(st.Buckets.Buckets), f.Edge, f.Budget)
		st.Buckets.Print(os.Stdout)
	}
	if st.Packed != nil {
		fmt.Printf("\npacked (train's default, %d rows a batch):\n", f.Rows)
		st.Packed.Print(os.Stdout)
	}
	return nil
}

// showFlags are the flags of `dflash data show`, bound with train.BindOptions.
type showFlags struct {
	Tokenizer string `yaml:"tokenizer" help:"model directory of the tokenizer the data was prepared with (required)"`
	First     int    `yaml:"i" range:">=0" help:"first sample index"`
	Count     int    `yaml:"n" range:">=1" help:"number of samples"`
}

func dataShow(args []string) error {
	fs := newFlagSet("data show", "data show --tokenizer DIR [-i N] [-n COUNT] PREPARED_DIR")
	f := showFlags{Count: 1}
	if err := parseOptionArgs(fs, train.BindOptions(fs, &f), args); err != nil {
		return err
	}
	if fs.NArg() != 1 || f.Tokenizer == "" {
		return usageError(errors.New("want --tokenizer DIR and one prepared directory"))
	}
	tok, err := tokenizer.LoadDir(f.Tokenizer)
	if err != nil {
		return err
	}
	d, err := data.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer d.Close()
	if f.First < 0 || f.First >= d.Len() {
		return fmt.Errorf("-i %d: %s holds samples 0 to %d", f.First, fs.Arg(0), d.Len()-1)
	}
	for i := f.First; i < min(d.Len(), f.First+f.Count); i++ {
		ids, mask := d.Sample(i)
		fmt.Printf("=== sample %d: %d tokens; supervised text between ⟦ and ⟧\n", i, len(ids))
		for k := 0; k < len(ids); {
			j := k
			for j < len(ids) && mask[j] == mask[k] {
				j++
			}
			text := tok.Decode(ids[k:j], false)
			if mask[k] == 1 {
				text = "⟦" + text + "⟧"
			}
			fmt.Print(text)
			k = j
		}
		fmt.Println()
	}
	return nil
}

func dataTokenize(args []string) error {
	fs := newFlagSet("data tokenize", "data tokenize --tokenizer DIR [--decode] [TEXT...]  (stdin when no TEXT)")
	tokDir := fs.String("tokenizer", "", "model directory with tokenizer.json (required)")
	decode := fs.Bool("decode", false, "read ids (space separated) and print their text")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *tokDir == "" {
		return errors.New("--tokenizer is required")
	}
	tok, err := tokenizer.LoadDir(*tokDir)
	if err != nil {
		return err
	}
	input := strings.Join(fs.Args(), " ")
	if fs.NArg() == 0 {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		input = string(b)
	}
	if *decode {
		var ids []int32
		for _, f := range strings.Fields(strings.NewReplacer(",", " ", "[", " ", "]", " ").Replace(input)) {
			v, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				return fmt.Errorf("id %q: %w", f, err)
			}
			if _, ok := tok.Token(int32(v)); !ok {
				return fmt.Errorf("id %d is outside the vocabulary (size %d)", v, tok.VocabSize())
			}
			ids = append(ids, int32(v))
		}
		fmt.Println(tok.Decode(ids, false))
		return nil
	}
	ids := tok.Encode(input)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	fmt.Println(strings.Join(parts, " "))
	fmt.Fprintf(os.Stderr, "%d tokens, %d bytes\n", len(ids), len(input))
	return nil
}
