package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"dflash/data/chat"
	"dflash/data/jsonl"
	"dflash/data/tokenizer"
)

// pipeline turns JSONL files into samples under Options: lines are read in
// order, rendered and tokenized on all cores, and handed to keep in input
// order, so its output depends only on its inputs and options.
type pipeline struct {
	opts     Options
	format   jsonl.Format
	tok      *tokenizer.Tokenizer
	tmpl     *chat.Template
	files    []string
	workers  int            // 0: GOMAXPROCS
	progress func(Progress) // optional, about every 100 ms
	// skipFlag is the flag that sets SkipBadLines in the command that runs
	// the pipeline (data prep's --skip-bad-lines, train's
	// --data.skip-bad-lines), named by the error of a bad line.
	skipFlag string
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

// run reads every file and calls keep with each kept sample, in input
// order; it fails on the first bad line unless SkipBadLines, on an error
// from keep, and when no sample is kept.
func (p *pipeline) run(ctx context.Context, keep func(ids []int32, mask []uint8) error) (Summary, error) {
	start := time.Now()
	lines, err := jsonl.OpenLines(p.files)
	if err != nil {
		return Summary{}, err
	}
	defer lines.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := p.workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	jobs := make(chan job, 2*workers)
	results := make(chan done, 2*workers)
	readErr := make(chan error, 1)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		readErr <- readBatches(ctx, lines, jobs)
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() { defer wg.Done(); p.work(ctx, jobs, results) }()
	}
	go func() { wg.Wait(); close(results) }()

	sum, err := p.collect(results, lines, start, keep)
	if err != nil {
		cancel()
		for range results { // let the workers finish
		}
	}
	<-readerDone // before the deferred lines.Close
	if err != nil {
		return sum, err
	}
	if err := ctx.Err(); err != nil { // interrupted
		return sum, err
	}
	if err := <-readErr; err != nil {
		return sum, err
	}
	sum.Files, sum.Blank = lines.Files(), lines.Blank()
	p.report(lines, sum, start)
	if sum.Kept == 0 {
		return sum, p.emptyError(sum)
	}
	return sum, nil
}

// readBatches sends the lines in batches, in order, and closes jobs.
func readBatches(ctx context.Context, lines *jsonl.Lines, jobs chan<- job) error {
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
			return err
		}
		ln.Text = append([]byte(nil), ln.Text...)
		batch = append(batch, ln)
		if len(batch) == defaultBatchSize && !send() {
			return nil
		}
	}
	if len(batch) > 0 {
		send()
	}
	return nil
}

// work turns batches of lines into results.
func (p *pipeline) work(ctx context.Context, jobs <-chan job, results chan<- done) {
	for j := range jobs {
		out := make([]result, len(j.lines))
		for k, ln := range j.lines {
			out[k] = p.process(ln)
		}
		select {
		case results <- done{j.seq, out}:
		case <-ctx.Done():
			return
		}
	}
}

// collect puts the results back in input order, counts them and keeps the
// samples.
func (p *pipeline) collect(results <-chan done, lines *jsonl.Lines, start time.Time, keep func([]int32, []uint8) error) (Summary, error) {
	sum := Summary{BadLines: map[string]int{}, BadFiles: map[string]map[string]int{}, Dropped: map[string]int{}}
	pending := map[int][]result{}
	next := 0
	last := time.Now()
	for d := range results {
		pending[d.seq] = d.results
		for rs, ok := pending[next]; ok; rs, ok = pending[next] {
			delete(pending, next)
			next++
			for _, r := range rs {
				if err := p.count(&sum, r, keep); err != nil {
					return sum, err
				}
			}
		}
		if time.Since(last) >= 100*time.Millisecond {
			last = time.Now()
			p.report(lines, sum, start)
		}
	}
	return sum, nil
}

// count adds one result to sum, keeping its sample.
func (p *pipeline) count(sum *Summary, r result, keep func([]int32, []uint8) error) error {
	sum.Lines++
	switch {
	case r.bad != nil:
		if !p.opts.SkipBadLines {
			return fmt.Errorf("%w (use %s to skip bad lines)", r.bad, p.skipFlag)
		}
		sum.BadLines[r.bad.Reason]++
		if sum.BadFiles[r.bad.File] == nil {
			sum.BadFiles[r.bad.File] = map[string]int{}
		}
		sum.BadFiles[r.bad.File][r.bad.Reason]++
	case r.drop != "":
		sum.Dropped[r.drop]++
	default:
		if err := keep(r.ids, r.mask); err != nil {
			return err
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
	return nil
}

func (p *pipeline) report(lines *jsonl.Lines, sum Summary, start time.Time) {
	if p.progress != nil {
		p.progress(Progress{BytesRead: lines.BytesRead(), BytesTotal: jsonl.TotalBytes(p.files),
			Lines: sum.Lines, Kept: sum.Kept, Elapsed: time.Since(start)})
	}
}

// emptyError says that no sample was kept, naming the files and what their
// lines became.
func (p *pipeline) emptyError(sum Summary) error {
	var why []string
	for _, m := range []map[string]int{sum.BadLines, sum.Dropped} {
		for k, v := range m {
			why = append(why, fmt.Sprintf("%d %s", v, k))
		}
	}
	sort.Strings(why)
	detail := ""
	if len(why) > 0 {
		detail = ": " + strings.Join(why, ", ")
	}
	return fmt.Errorf("no usable conversation in %s: %d lines read (and %d blank)%s",
		strings.Join(p.files, ", "), sum.Lines, sum.Blank, detail)
}

// process turns one line into a sample, a drop or a bad line.
func (p *pipeline) process(ln jsonl.Line) result {
	var r result
	msgs, err := jsonl.Parse(ln, p.format)
	if err != nil {
		var le *jsonl.LineError
		if !errors.As(err, &le) {
			le = &jsonl.LineError{File: ln.File, Line: ln.N, Reason: jsonl.ReasonJSON, Detail: err.Error()}
		}
		r.bad = le
		return r
	}
	enc, err := p.tmpl.EncodeSample(p.tok, msgs, chat.Options{EnableThinking: p.opts.EnableThinking})
	if err != nil {
		r.bad = &jsonl.LineError{File: ln.File, Line: ln.N, Reason: ReasonTemplate, Detail: err.Error()}
		return r
	}
	r.crossing = enc.Crossing
	r.ids, r.mask, r.supervised, r.truncated, r.drop = p.opts.Fit(enc.IDs, enc.Mask)
	return r
}
