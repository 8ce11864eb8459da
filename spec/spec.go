package spec

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"dflash/model"
	"dflash/tensor"
)

// Drafter proposes draft blocks for a target. DFlash adapts a trained
// dflash drafter; tests use others (an oracle that knows the target's
// output) to force long acceptances.
type Drafter interface {
	// BlockSize is B, the tokens of a block (the last accepted token and
	// B−1 drafts).
	BlockSize() int
	// Taps are the target decoder layers (0-based) whose outputs Extend
	// receives, in order.
	Taps() []int
	// Start returns the state of a new sequence with an empty context of
	// up to maxLen positions.
	Start(maxLen int) Sequence
	// Propose drafts one block for each of its sequences (made by Start),
	// in one pass where it can, and returns their rows: block r, rows
	// r·B..r·B+B−1, holds last[r] in slot 0 at the position just after
	// seqs[r]'s context, and its row s ≥ 1 is the draft distribution of
	// the token s positions later (row 0 is ignored). With greedy
	// (decoding at temperature 0) it may return each row's argmax alone
	// (model.ReadRows), else it returns the logits [R·B, V] in host memory.
	Propose(seqs []Sequence, last []int32, greedy bool) model.Rows
}

// Sequence is a drafter's state for one sequence.
type Sequence interface {
	// Extend appends the next positions to the context: one [n, Hidden]
	// tensor per tap (the outputs of the tapped target layers), on the
	// backend the target decodes on.
	Extend(hidden []*tensor.Tensor)
	// Free gives back what the sequence holds; it is not used afterwards.
	Free()
}

// Options control Generate and GenerateBatch. Temperature 0 decodes
// greedily.
type Options struct {
	MaxNewTokens int
	Temperature  float64
	TopK         int
	Seed         uint64
	Stop         []int32 // generation ends after any of these tokens (included)
}

// Stats counts one or more generations.
type Stats struct {
	B int `json:"block_size"`
	// Rounds is the number of target verifications (the prefill is not one).
	Rounds int `json:"rounds"`
	// Histogram[n−1] counts rounds with acceptance length n = accepted
	// drafts + 1 (the target's own token), n = 1..B.
	Histogram []int `json:"acceptance_histogram"`
	// SlotAccepted[s−1] and SlotTried[s−1] count, for block position
	// s = 1..B−1, the rounds whose draft s was accepted and those that
	// reached it (every earlier draft accepted and the block verified
	// that far).
	SlotAccepted []int `json:"slot_accepted"`
	SlotTried    []int `json:"slot_tried"`
	// Tokens are the generated tokens, the prefill's first one included.
	Tokens int `json:"tokens"`
	// The seconds of the prefill, the drafting and the verification passes
	// (a pass of several rows of GenerateBatch counts its share: its time
	// over its rows).
	PrefillSeconds float64 `json:"prefill_seconds"`
	DraftSeconds   float64 `json:"draft_seconds"`
	VerifySeconds  float64 `json:"verify_seconds"`
}

// NewStats returns empty statistics for block size b.
func NewStats(b int) *Stats {
	return &Stats{B: b, Histogram: make([]int, b), SlotAccepted: make([]int, b-1), SlotTried: make([]int, b-1)}
}

// Add accumulates o into s (same block size).
func (s *Stats) Add(o *Stats) {
	if o.B != s.B {
		panic(fmt.Sprintf("spec: Stats.Add: block size %d into %d", o.B, s.B))
	}
	s.Rounds += o.Rounds
	s.Tokens += o.Tokens
	s.PrefillSeconds += o.PrefillSeconds
	s.DraftSeconds += o.DraftSeconds
	s.VerifySeconds += o.VerifySeconds
	for i := range s.Histogram {
		s.Histogram[i] += o.Histogram[i]
	}
	for i := range s.SlotTried {
		s.SlotAccepted[i] += o.SlotAccepted[i]
		s.SlotTried[i] += o.SlotTried[i]
	}
}

// AcceptanceLength is the mean number of tokens a target verification
// produced (accepted drafts + 1); 0 without rounds.
func (s *Stats) AcceptanceLength() float64 {
	n := 0
	for i, c := range s.Histogram {
		n += (i + 1) * c
	}
	if s.Rounds == 0 {
		return 0
	}
	return float64(n) / float64(s.Rounds)
}

// SlotAcceptance returns, for block positions s = 1..B−1 (index s−1), the
// fraction of rounds reaching draft s that accepted it (0 where none did).
func (s *Stats) SlotAcceptance() []float64 {
	a := make([]float64, len(s.SlotTried))
	for i, t := range s.SlotTried {
		if t > 0 {
			a[i] = float64(s.SlotAccepted[i]) / float64(t)
		}
	}
	return a
}

// Generate continues prompt with up to o.MaxNewTokens tokens by speculative
// decoding with d and returns them with the round statistics. Like
// model.Generate, the sequence never grows past target.ContextLimit() and
// ends after a stop token. It checks ctx between rounds. It is
// GenerateBatch of one prompt.
func Generate(ctx context.Context, b tensor.Backend[float32], target *model.Model, d Drafter, prompt []int32, o Options) ([]int32, *Stats, error) {
	out, st, err := GenerateBatch(ctx, b, target, d, [][]int32{prompt}, o)
	if err != nil {
		return nil, nil, err
	}
	return out[0], st[0], nil
}

// specRow is one sequence of GenerateBatch.
type specRow struct {
	i         int // prompt index
	prompt    []int32
	maxNew    int
	cache     *model.Cache
	seq       Sequence
	rng       *rand.Rand
	st        *Stats
	out       []int32
	block     []int32 // the round's block
	n         int     // its length
	draftRows model.Rows
}

// GenerateBatch is Generate of every prompt at once. Each prompt is
// prefilled on its own; then each round drafts a block for every row still
// running in one d.Propose and verifies the blocks in one
// model.DecodeRows pass per block length (row r's n_r = min(B, tokens it
// may still add, room before the context limit): all rows share B but
// those near their end, which go in a pass of their own rather than
// padded); each row accepts, rolls back and extends its drafter context on
// its own, and leaves the batch when it is done. Row r draws its drafts
// and acceptances from its own generator, seeded with o.Seed+r (what
// Generate of that prompt alone with Seed o.Seed+r uses), so its tokens do
// not depend on the batch it is in. d.Start is called for the prompts that
// get a token (shorter than the context limit), in order. A batched
// pass's time is shared equally among its rows in their Stats (summed over
// the rows, it is the pass's wall time).
func GenerateBatch(ctx context.Context, b tensor.Backend[float32], target *model.Model, d Drafter, prompts [][]int32, o Options) ([][]int32, []*Stats, error) {
	for i, p := range prompts {
		if err := target.CheckPrompt(p); err != nil {
			if len(prompts) > 1 {
				err = fmt.Errorf("prompt %d: %w", i, err)
			}
			return nil, nil, fmt.Errorf("spec.Generate: %w", err)
		}
	}
	B := d.BlockSize()
	limit := target.ContextLimit()
	states := make([]int, len(d.Taps()))
	for i, t := range d.Taps() {
		states[i] = t + 1 // the output of layer t is HF hidden state t+1
	}
	greedy := o.Temperature <= 0
	stats := make([]*Stats, len(prompts))
	outs := make([][]int32, len(prompts))
	var run []*specRow
	for i, p := range prompts {
		stats[i] = NewStats(B)
		if maxNew := min(o.MaxNewTokens, limit-len(p)); maxNew > 0 {
			run = append(run, &specRow{i: i, prompt: p, maxNew: maxNew, rng: rand.New(rand.NewPCG(o.Seed+uint64(i), 0x5bec)), st: stats[i]})
		}
	}
	all := slices.Clone(run)
	defer func() {
		for _, r := range slices.Backward(all) { // last allocated first (tensor.KVCache.Free)
			if r.seq != nil {
				r.seq.Free()
			}
			if r.cache != nil {
				r.cache.Free()
			}
		}
	}()
	for _, r := range run {
		// The target's cache holds every position the rounds verify (the
		// last is the maxNew-th token's predecessor); the drafter's context
		// the positions before the last token.
		r.cache = target.NewCache(b, len(r.prompt)+r.maxNew)
		r.seq = d.Start(len(r.prompt) + r.maxNew)
	}
	for _, r := range run {
		t0 := time.Now()
		tensor.Scope(b, func() {
			logits, hidden := target.Prefill(b, r.cache, r.prompt, states)
			r.seq.Extend(taps(hidden, states, 0, len(r.prompt)))
			r.out = []int32{model.ReadRows(b, logits, greedy).Pick(0, o.Temperature, o.TopK, r.rng)}
		})
		r.st.PrefillSeconds = time.Since(t0).Seconds()
	}
	V := target.Config.VocabSize
	for {
		run = slices.DeleteFunc(run, func(r *specRow) bool { return done(r.out, r.maxNew, o.Stop) })
		if len(run) == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		// Each pass of the round (the proposal, each verification) runs in
		// a scope of its own, so every one starts where the round began in
		// the step arena: a pass of the same key then allocates at the same
		// addresses whatever the passes before it in the round did (rows
		// near their end verified apart, accepted lengths extending the
		// contexts), and its CUDA graph replays instead of being captured
		// again. Every pass leaves its results on the host or in the caches.
		t1 := time.Now()
		seqs, last := make([]Sequence, len(run)), make([]int32, len(run))
		for k, r := range run {
			seqs[k], last[k] = r.seq, r.out[len(r.out)-1]
		}
		var draft model.Rows
		tensor.Scope(b, func() { draft = d.Propose(seqs, last, greedy) })
		if draft.Len() != len(run)*B || draft.IDs == nil && draft.Vocab != V {
			panic(fmt.Sprintf("spec: drafter returned %d rows of %d ids and %d logits for %d blocks of %d × vocab %d", draft.Len(), len(draft.IDs), len(draft.Logits), len(run), B, V))
		}
		var lengths []int // the distinct block lengths, in the rows' order
		for k, r := range run {
			start := len(r.prompt) + len(r.out) - 1 // position of the last token, not yet seen by the target
			r.n = min(B, r.maxNew-len(r.out), limit-1-start)
			r.draftRows = draft.Sub(k*B, (k+1)*B)
			r.block = make([]int32, r.n)
			r.block[0] = last[k]
			for s := 1; s < r.n; s++ {
				r.block[s] = r.draftRows.Pick(s, o.Temperature, o.TopK, r.rng)
			}
			if !slices.Contains(lengths, r.n) {
				lengths = append(lengths, r.n)
			}
		}
		t2 := time.Now()
		share := t2.Sub(t1).Seconds() / float64(len(run))
		for _, r := range run {
			r.st.DraftSeconds += share
		}
		for _, n := range lengths {
			var rows []*specRow
			for _, r := range run {
				if r.n == n {
					rows = append(rows, r)
				}
			}
			tensor.Scope(b, func() { verifyRows(b, target, rows, n, states, o) })
		}
	}
	for _, r := range all {
		outs[r.i] = r.out
		r.st.Tokens = len(r.out)
	}
	return outs, stats, nil
}

// verifyRows verifies the blocks of rows, all of length n, in one
// target.DecodeRows pass, then accepts, rolls back and extends each row on
// its own; the pass's time is shared equally among the rows' Stats.
func verifyRows(b tensor.Backend[float32], target *model.Model, rows []*specRow, n int, states []int, o Options) {
	t0 := time.Now()
	caches := make([]*model.Cache, len(rows))
	tokens := make([]int32, 0, len(rows)*n)
	for j, r := range rows {
		caches[j], tokens = r.cache, append(tokens, r.block...)
	}
	vl, vh := target.DecodeRows(b, caches, tokens, states)
	verified := model.ReadRows(b, vl, o.Temperature <= 0)
	for j, r := range rows {
		start := r.cache.Len - n // the block's first position
		accepted := r.accept(verified.Sub(j*n, (j+1)*n), o)
		if !done(r.out, r.maxNew, o.Stop) { // roll back the rejected drafts; the accepted positions join the context
			r.cache.Truncate(start + accepted + 1)
			r.seq.Extend(taps(vh, states, j*n, j*n+accepted+1))
		}
	}
	share := time.Since(t0).Seconds() / float64(len(rows))
	for _, r := range rows {
		r.st.VerifySeconds += share
	}
}

// accept applies the acceptance rule to the row's verified block (the
// target's rows of it), counts the round in its Stats, appends the
// accepted drafts and the next token to its output (up to its end) and
// returns the number of drafts accepted.
func (r *specRow) accept(verified model.Rows, o Options) int {
	n, st := r.n, r.st
	accepted, next := verify(verified, r.draftRows, r.block, o, r.rng)
	st.Rounds++
	st.Histogram[accepted]++
	for s := 1; s < n && s <= accepted+1; s++ {
		st.SlotTried[s-1]++
		if s <= accepted {
			st.SlotAccepted[s-1]++
		}
	}
	for _, x := range append(r.block[1:accepted+1], next) {
		if done(r.out, r.maxNew, o.Stop) {
			break
		}
		r.out = append(r.out, x)
	}
	return accepted
}

// done reports whether generation is over: maxNew tokens or a stop token.
func done(out []int32, maxNew int, stop []int32) bool {
	return len(out) >= maxNew || len(out) > 0 && slices.Contains(stop, out[len(out)-1])
}

// taps returns rows lo..hi−1 of each hidden state in states ([n, H]), in
// order: views of their storage, nothing copied.
func taps(hidden map[int]*tensor.Tensor, states []int, lo, hi int) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(states))
	for i, s := range states {
		h := hidden[s]
		H := h.Cols()
		out[i] = tensor.FromStorage(h.Name, h.Store.Slice(lo*H, hi*H), hi-lo, H)
	}
	return out
}
