package data

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"dflash/data/chat"
	"dflash/data/shard"
	"dflash/data/tokenizer"
)

// Sample is one training sequence: token ids and the loss mask (1 on
// assistant-generated tokens).
type Sample struct {
	IDs  []int32
	Mask []uint8
}

// Target is what training data must fit: the target model's tokenizer and
// the rows of its embedding (config.json's vocab_size).
type Target struct {
	Tokenizer *tokenizer.Tokenizer
	Template  *chat.Template
	Vocab     int
	// Context is the longest sequence the target attends over
	// (max_position_embeddings; 0: no limit).
	Context int
}

// Load reads training samples from args, in order, for target t under opts:
// each a directory written by Prep (opened with OpenFor, then Options.Fit
// applied to each sample), or JSONL conversations (a file, or every *.jsonl,
// *.jsonl.gz and *.jsonl.zst in a directory), all of them read as Prep reads
// them, as one input. Every id is checked against t before training: a
// tokenizer larger than the vocabulary, data prepared with another tokenizer, a
// corrupt shard or an id outside the vocabulary is an error that names it. A
// sample longer than t's context is cut or dropped as one longer than
// opts.MaxLen is (Options.Context).
func Load(ctx context.Context, args []string, opts Options, t Target, workers int) ([]Sample, Summary, error) {
	if err := CheckVocab(t.Tokenizer, t.Vocab); err != nil {
		return nil, Summary{}, err
	}
	if len(args) == 0 {
		return nil, Summary{}, fmt.Errorf("no input")
	}
	opts.Context = t.Context
	var out []Sample
	var sum Summary
	var files []string
	for _, arg := range args {
		fs, prepared, err := InputFiles(arg)
		if err != nil {
			return nil, Summary{}, err
		}
		if !prepared {
			files = append(files, fs...)
			continue
		}
		d, err := OpenFor(arg, t.Tokenizer, t.Vocab)
		if err != nil {
			return nil, Summary{}, err
		}
		samples, s := ReadPrepared(d, opts)
		d.Close()
		out = append(out, samples...)
		sum.add(s)
	}
	if len(files) == 0 {
		return out, sum, nil
	}
	p, err := newPipeline(opts, "", t.Tokenizer, t.Template)
	if err != nil {
		return nil, Summary{}, err
	}
	p.files, p.workers, p.skipFlag = files, workers, "--data.skip-bad-lines"
	s, err := p.run(ctx, func(ids []int32, mask []uint8) error {
		out = append(out, Sample{IDs: ids, Mask: mask})
		return nil
	})
	sum.add(s)
	return out, sum, err
}

// InputFiles expands a data argument: a directory with meta.json is a
// prepared directory (prepared true); another directory stands for its
// *.jsonl, *.jsonl.gz and *.jsonl.zst files, in name order; a file is
// itself.
func InputFiles(arg string) (files []string, prepared bool, err error) {
	st, err := os.Stat(arg)
	if err != nil {
		return nil, false, err // names the path
	}
	if !st.IsDir() {
		return []string{arg}, false, nil
	}
	if _, err := os.Stat(filepath.Join(arg, shard.MetaFile)); err == nil {
		return nil, true, nil
	}
	entries, err := os.ReadDir(arg)
	if err != nil {
		return nil, false, err
	}
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() && (strings.HasSuffix(n, ".jsonl") || strings.HasSuffix(n, ".jsonl.gz") || strings.HasSuffix(n, ".jsonl.zst")) {
			files = append(files, filepath.Join(arg, n))
		}
	}
	if len(files) == 0 {
		return nil, false, fmt.Errorf("%s: no .jsonl, .jsonl.gz or .jsonl.zst files (and no %s)", arg, shard.MetaFile)
	}
	return files, false, nil
}

// CheckVocab reports a tokenizer whose ids reach past the target's
// embedding rows.
func CheckVocab(tok *tokenizer.Tokenizer, vocab int) error {
	if n := tok.VocabSize(); n > vocab {
		return fmt.Errorf("the tokenizer has %d tokens but the target's vocab_size is %d: ids from %d up have no embedding row (is it the target's tokenizer?)", n, vocab, vocab)
	}
	return nil
}

// OpenFor opens a prepared directory for training a target with tokenizer
// tok and vocab embedding rows: meta.json must record tok's hash, every
// shard's checksum is verified (one pass over the mapped files), and every
// id must lie in [0, vocab).
func OpenFor(dir string, tok *tokenizer.Tokenizer, vocab int) (*Dataset, error) {
	d, err := Open(dir)
	if err != nil {
		return nil, err
	}
	info, err := infoOf(d)
	if err == nil && info.TokenizerHash != "" && info.TokenizerHash != tok.Hash() {
		err = fmt.Errorf("%s was prepared with another tokenizer (%s, sha256 %.12s…), not the target's (sha256 %.12s…): re-run data prep with the target's tokenizer",
			dir, info.Tokenizer, info.TokenizerHash, tok.Hash())
	}
	if err == nil {
		err = d.Verify()
	}
	if err == nil {
		err = d.CheckIDs(vocab)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// ReadPrepared copies the samples of d that pass opts.Fit (a MaxLen
// shorter than the one d was prepared with truncates or drops again).
func ReadPrepared(d *Dataset, opts Options) ([]Sample, Summary) {
	sum := Summary{Dropped: map[string]int{}}
	var out []Sample
	for i := range d.Len() {
		ids, mask, supervised, truncated, drop := opts.Fit(d.Sample(i))
		sum.Lines++
		if drop != "" {
			sum.Dropped[drop]++
			continue
		}
		out = append(out, Sample{IDs: slices.Clone(ids), Mask: slices.Clone(mask)})
		sum.Kept++
		sum.Tokens += int64(len(ids))
		sum.Supervised += int64(supervised)
		sum.MaxLen = max(sum.MaxLen, len(ids))
		if truncated {
			sum.Truncated++
		}
	}
	return out, sum
}
