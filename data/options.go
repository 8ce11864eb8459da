package data

import (
	"fmt"

	"dflash/data/jsonl"
)

// Options are the rules that turn a conversation into a training sample.
// `dflash data prep` and `dflash train` on JSONL both use them, with the
// same defaults (DefaultOptions), so the same file gives the same samples
// whichever path reads it. Per conversation, in this order:
//
//  1. a line that is not a valid conversation is bad (jsonl.LineError);
//  2. a conversation the template cannot render (or whose rendered text
//     holds more or fewer assistant turns than it has) is bad too;
//  3. a sample longer than MaxLen, or than the target's Context, is truncated
//     to the shorter of the two, or dropped with DropLong;
//  4. a sample with fewer than 2 x BlockSize supervised tokens is dropped
//     (it cannot hold one DFlash block after an anchor).
//
// A bad line ends the run with an error naming file and line, unless
// SkipBadLines is set: then bad lines are counted by file and reason and
// skipped.
type Options struct {
	Format         string `yaml:"format" choice:"auto,messages,sharegpt" help:"JSONL line format"`
	MaxLen         int    `yaml:"max-len" range:">=0" help:"maximum tokens per sample (0: no limit)"`
	DropLong       bool   `yaml:"drop-long" help:"drop samples longer than max-len instead of truncating them"`
	EnableThinking bool   `yaml:"enable-thinking" help:"Qwen3 thinking mode: the empty <think></think> block is generated (supervised); false: it is prompt"`
	SkipBadLines   bool   `yaml:"skip-bad-lines" help:"count and skip malformed lines instead of failing on the first"`
	// BlockSize is the DFlash block size; it is the drafter's, so it has no
	// key of its own here.
	BlockSize int `yaml:"-"`
	// Context is the target's context (max_position_embeddings; 0: no
	// limit), which no sample may pass whatever MaxLen says (FitsContext);
	// Load sets it from the target.
	Context int `yaml:"-"`
}

// FitsContext reports whether a sequence of n tokens fits a target whose
// context is limit tokens (max_position_embeddings; 0 or less: no limit): the
// one rule by which training cuts or drops samples (Options.Fit) and spec
// refuses prompts.
func FitsContext(n, limit int) bool { return limit <= 0 || n <= limit }

// DefaultOptions returns the defaults of `data prep` and `train`.
func DefaultOptions() Options {
	return Options{Format: "auto", MaxLen: 4096, EnableThinking: true, BlockSize: 16}
}

// Validate checks the options and returns the parsed line format.
func (o Options) Validate() (jsonl.Format, error) {
	f, err := jsonl.ParseFormat(o.Format)
	switch {
	case err != nil:
		return f, fmt.Errorf("format: %w", err)
	case o.BlockSize <= 0:
		return f, fmt.Errorf("block size %d: must be at least 1", o.BlockSize)
	case o.MaxLen < 0:
		return f, fmt.Errorf("max-len %d: must not be negative", o.MaxLen)
	case o.MaxLen > 0 && o.MaxLen < 2*o.BlockSize:
		return f, fmt.Errorf("max-len %d leaves no room for 2 x block size %d supervised tokens", o.MaxLen, o.BlockSize)
	}
	return f, nil
}

// Fit applies rules 3 and 4 to an encoded sample: it returns the sample
// (truncated when longer than MaxLen or Context without DropLong) and its supervised
// token count, or the reason it is dropped (DropTooLong, DropFewTokens).
func (o Options) Fit(ids []int32, mask []uint8) (fitIDs []int32, fitMask []uint8, supervised int, truncated bool, drop string) {
	limit := o.MaxLen
	if o.Context > 0 && (limit == 0 || o.Context < limit) {
		limit = o.Context
	}
	if !FitsContext(len(ids), limit) {
		if o.DropLong {
			return nil, nil, 0, false, DropTooLong
		}
		ids, mask, truncated = ids[:limit], mask[:limit], true
	}
	for _, m := range mask {
		supervised += int(m)
	}
	if supervised < 2*o.BlockSize {
		return nil, nil, 0, false, DropFewTokens
	}
	return ids, mask, supervised, truncated, ""
}

// overflowName is how Info records DropLong.
func (o Options) overflowName() string {
	if o.DropLong {
		return "drop"
	}
	return "truncate"
}
