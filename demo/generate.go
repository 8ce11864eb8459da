package demo

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"dflash/model"
	"dflash/tensor"
)

// greedyBatched decodes the prompts greedily (up to o.GenTokens tokens
// each, ending after stop) o.GenBatch at a time on b, and returns the
// responses in prompt order. Each token is one forward pass of the whole
// batch without a KV cache: the rows padded on the right to the longest
// (causal attention: a row's last token sees none of its padding), the
// next token of each row the argmax of its last position's logits. A pass
// recomputes every earlier position, several times the work of decoding
// with a cache, but it is a few large products instead of one small one
// per row and token: on a GPU, where a decode step of a small target costs
// its kernel launches, the batch generates thousands of tokens a second.
func greedyBatched(ctx context.Context, m *model.Model, b tensor.Backend[float32], prompts [][]int32, o Options, stop int32, w io.Writer) ([][]int32, error) {
	outs := make([][]int32, len(prompts))
	start, tokens := time.Now(), 0
	for lo := 0; lo < len(prompts); lo += o.GenBatch {
		hi := min(lo+o.GenBatch, len(prompts))
		if err := greedyRows(ctx, m, b, prompts[lo:hi], outs[lo:hi], o.GenTokens, stop); err != nil {
			return nil, err
		}
		for _, out := range outs[lo:hi] {
			tokens += len(out)
		}
		if o.Progress != "off" {
			fmt.Fprintf(w, "\rgenerate %d/%d conversations, %d tokens, %.0f tok/s   ", hi, len(prompts), tokens, float64(tokens)/time.Since(start).Seconds())
		}
	}
	if o.Progress != "off" {
		fmt.Fprintln(w)
	}
	return outs, nil
}

// genAlign is the multiple of tokens greedyRows pads its passes to.
const genAlign = 32

// greedyRows decodes one batch of prompts into outs (greedyBatched). Rows
// that have ended (stop, maxNew tokens or the context limit) stay in the
// batch until every row has ended; their tokens are not read.
func greedyRows(ctx context.Context, m *model.Model, b tensor.Backend[float32], prompts, outs [][]int32, maxNew int, stop int32) error {
	n := len(prompts)
	seqs := make([][]int32, n)
	done := make([]bool, n)
	for i, p := range prompts {
		if err := m.CheckPrompt(p); err != nil {
			return fmt.Errorf("demo: prompt %d: %w", i, err)
		}
		seqs[i] = slices.Clone(p)
		done[i] = len(p) >= m.ContextLimit()
	}
	for !allTrue(done) {
		if err := ctx.Err(); err != nil {
			return err
		}
		L := 0
		for _, s := range seqs {
			L = max(L, len(s))
		}
		// A multiple of genAlign: a few shapes over a batch's tokens, not one
		// per token (a device tunes its GEMMs and builds its attention per shape).
		L = min((L+genAlign-1)/genAlign*genAlign, max(L, m.ContextLimit()))
		ids := make([]int32, n*L) // padding: token 0, after each row's last token
		last := make([]int32, n)  // the row of each sequence's last token in [n·L]
		for i, s := range seqs {
			copy(ids[i*L:], s)
			last[i] = int32(i*L + len(s) - 1)
		}
		tp := tensor.NewInference(b)
		out := m.Forward(tp, model.Input{IDs: ids, Batch: n, Len: L})
		// Each row's argmax is downloaded, not its logits.
		picks := tensor.RowArgmax(b, m.Logits(tp, tp.Embedding(out.Final, b.UploadInts(last))))
		b.ResetStep() // the pass's storage and block mask
		for i := range seqs {
			if done[i] {
				continue
			}
			next := picks[i]
			seqs[i], outs[i] = append(seqs[i], next), append(outs[i], next)
			done[i] = next == stop || len(outs[i]) >= maxNew || len(seqs[i]) >= m.ContextLimit()
		}
	}
	return nil
}

// allTrue reports whether every element of v is true.
func allTrue(v []bool) bool { return !slices.Contains(v, false) }
