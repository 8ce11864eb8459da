package spec

import (
	"context"
	"fmt"
	"slices"
	"time"

	"dflash/model"
	"dflash/tensor"
)

// Speed is the decoding speed over a set of prompts.
type Speed struct {
	Tokens     int     `json:"tokens"`
	Seconds    float64 `json:"seconds"`
	TokensPerS float64 `json:"tokens_per_s"`
}

func speed(tokens int, seconds float64) Speed {
	s := Speed{Tokens: tokens, Seconds: seconds}
	if seconds > 0 {
		s.TokensPerS = float64(tokens) / seconds
	}
	return s
}

// Report is the result of Run (the JSON of `dflash spec --json`).
type Report struct {
	Prompts int `json:"prompts"`
	// Batch is the number of prompts decoded at once (Run's batch).
	Batch        int     `json:"batch"`
	BlockSize    int     `json:"block_size"`
	MaxNewTokens int     `json:"max_new_tokens"`
	Temperature  float64 `json:"temperature"`
	TopK         int     `json:"top_k"`
	// AcceptanceLength is the mean number of tokens per target
	// verification (accepted drafts + 1), over every round of every prompt.
	AcceptanceLength float64 `json:"acceptance_length"`
	// Histogram[n−1] is the number of rounds of acceptance length n.
	Histogram []int `json:"acceptance_histogram"`
	// PositionAcceptance[s−1] is the fraction of rounds reaching draft s
	// that accepted it, s = 1..B−1.
	PositionAcceptance []float64 `json:"acceptance_per_position"`
	Rounds             int       `json:"rounds"`
	// Speculative and Baseline time the same prompts on the same backend,
	// in the same batches, with and without the drafter (each batch's wall
	// time); Speedup is the ratio of their tokens/s.
	Speculative Speed   `json:"speculative"`
	Baseline    *Speed  `json:"baseline,omitempty"`
	Speedup     float64 `json:"speedup,omitempty"`
	// GreedyMatches counts, when decoding greedily with a baseline, the
	// prompts whose output equals the target's own greedy output.
	GreedyMatches int `json:"greedy_matches,omitempty"`
	// DraftSeconds and VerifySeconds split the speculative time (the rest
	// is the prefill).
	DraftSeconds  float64 `json:"draft_seconds"`
	VerifySeconds float64 `json:"verify_seconds"`
}

// Generation is one prompt's output.
type Generation struct {
	Index            int     `json:"index"`
	Tokens           []int32 `json:"tokens"`
	Baseline         []int32 `json:"baseline_tokens,omitempty"`
	Rounds           int     `json:"rounds"`
	AcceptanceLength float64 `json:"acceptance_length"`
}

// Warm decodes a few tokens of prompts, all at once, with d and with the
// target alone, untimed and unreported, on a device (a backend whose
// parameters are not host memory), which compiles its kernels and chooses
// its products for the batch's shapes on first use, which Run would
// otherwise time: give it the first batch of Run's prompts. On the CPU it
// does nothing.
func Warm(ctx context.Context, b tensor.Backend[float32], target *model.Model, d Drafter, prompts [][]int32, o Options) error {
	if b.HostParams() {
		return nil
	}
	o.MaxNewTokens = min(o.MaxNewTokens, 2*d.BlockSize())
	if _, _, err := GenerateBatch(ctx, b, target, d, prompts, o); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if _, err := target.GenerateBatch(b, prompts, model.GenerateOptions{MaxNewTokens: 2, Temperature: o.Temperature, TopK: o.TopK, Seed: o.Seed}); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	return nil
}

// Run decodes the prompts batch at a time, in order (GenerateBatch; the
// seed of prompt i is o.Seed+i whatever the batch), with d and, with
// baseline, again with the target alone (model.GenerateBatch, the same
// batches and options), on b, and reports acceptance and speed. The
// tokens/s count each batch's wall time: at batch N, N prompts' tokens in
// the time of their batch. each, when not nil, receives every generation
// in order.
func Run(ctx context.Context, b tensor.Backend[float32], target *model.Model, d Drafter, prompts [][]int32, o Options, batch int, baseline bool, each func(Generation) error) (*Report, error) {
	if batch < 1 {
		return nil, fmt.Errorf("spec.Run: batch %d, want at least 1", batch)
	}
	st := NewStats(d.BlockSize())
	r := &Report{Prompts: len(prompts), Batch: batch, BlockSize: d.BlockSize(), MaxNewTokens: o.MaxNewTokens, Temperature: o.Temperature, TopK: o.TopK}
	var specSec, baseSec float64
	baseTok := 0
	for lo := 0; lo < len(prompts); lo += batch {
		chunk := prompts[lo:min(lo+batch, len(prompts))]
		bo := o
		bo.Seed = o.Seed + uint64(lo)
		where := func(err error) error {
			if len(chunk) == 1 {
				return fmt.Errorf("prompt %d: %w", lo, err)
			}
			return fmt.Errorf("prompts %d..%d: %w", lo, lo+len(chunk)-1, err)
		}
		t0 := time.Now()
		outs, stats, err := GenerateBatch(ctx, b, target, d, chunk, bo)
		if err != nil {
			return nil, where(err)
		}
		specSec += time.Since(t0).Seconds()
		var refs [][]int32
		if baseline {
			t1 := time.Now()
			refs, err = target.GenerateBatch(b, chunk, model.GenerateOptions{MaxNewTokens: o.MaxNewTokens, Temperature: o.Temperature, TopK: o.TopK, Seed: bo.Seed, Stop: o.Stop})
			if err != nil {
				return nil, where(err)
			}
			baseSec += time.Since(t1).Seconds()
		}
		for k, out := range outs {
			s := stats[k]
			st.Add(s)
			g := Generation{Index: lo + k, Tokens: out, Rounds: s.Rounds, AcceptanceLength: s.AcceptanceLength()}
			if baseline {
				baseTok += len(refs[k])
				g.Baseline = refs[k]
				if o.Temperature <= 0 && slices.Equal(refs[k], out) {
					r.GreedyMatches++
				}
			}
			if each != nil {
				if err := each(g); err != nil {
					return nil, err
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	r.AcceptanceLength, r.Histogram, r.PositionAcceptance, r.Rounds = st.AcceptanceLength(), st.Histogram, st.SlotAcceptance(), st.Rounds
	r.DraftSeconds, r.VerifySeconds = st.DraftSeconds, st.VerifySeconds
	r.Speculative = speed(st.Tokens, specSec)
	if baseline {
		bs := speed(baseTok, baseSec)
		r.Baseline = &bs
		if bs.TokensPerS > 0 {
			r.Speedup = r.Speculative.TokensPerS / bs.TokensPerS
		}
	}
	return r, nil
}
