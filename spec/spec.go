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
}

// Sequence is a drafter's state for one sequence.
type Sequence interface {
	// Extend appends the next positions to the context: one [n, Hidden]
	// tensor per tap (the outputs of the tapped target layers), on the
	// backend the target decodes on.
	Extend(hidden []*tensor.Tensor)
	// Propose returns the B rows of logits of a block whose slot 0 holds
	// last at the position just after the context: row s ≥ 1 is the draft
	// distribution of the token s positions later (row 0 is ignored). With
	// greedy (decoding at temperature 0) it may return each row's argmax
	// alone (model.ReadRows), else it returns the logits [B, V] in host
	// memory.
	Propose(last int32, greedy bool) model.Rows
	// Free gives back what the sequence holds; it is not used afterwards.
	Free()
}

// Options control Generate. Temperature 0 decodes greedily.
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
	Tokens         int     `json:"tokens"`
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
// ends after a stop token. It checks ctx between rounds.
func Generate(ctx context.Context, b tensor.Backend[float32], target *model.Model, d Drafter, prompt []int32, o Options) ([]int32, *Stats, error) {
	if err := target.CheckPrompt(prompt); err != nil {
		return nil, nil, fmt.Errorf("spec.Generate: %w", err)
	}
	B := d.BlockSize()
	st := NewStats(B)
	limit := target.ContextLimit()
	maxNew := min(o.MaxNewTokens, limit-len(prompt))
	if maxNew <= 0 {
		return nil, st, nil
	}
	states := make([]int, len(d.Taps()))
	for i, t := range d.Taps() {
		states[i] = t + 1 // the output of layer t is HF hidden state t+1
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x5bec))
	greedy := o.Temperature <= 0
	pick := func(r model.Rows, i int) int32 { return r.Pick(i, o.Temperature, o.TopK, rng) }

	t0 := time.Now()
	// The target's cache holds every position the rounds verify (the last
	// is the maxNew-th token's predecessor); the drafter's context the
	// positions before the last token.
	cache := target.NewCache(b, len(prompt)+maxNew)
	defer cache.Free()
	seq := d.Start(len(prompt) + maxNew)
	defer seq.Free()
	var out []int32
	tensor.Scope(b, func() {
		logits, hidden := target.Prefill(b, cache, prompt, states)
		seq.Extend(taps(hidden, states, 0, len(prompt)))
		out = []int32{pick(model.ReadRows(b, logits, greedy), 0)}
	})
	st.PrefillSeconds = time.Since(t0).Seconds()
	V := target.Config.VocabSize
	for !done(out, maxNew, o.Stop) {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		start := len(prompt) + len(out) - 1 // position of the last token, not yet seen by the target
		n := min(B, maxNew-len(out), limit-1-start)
		m := b.MarkStep() // the round's storage is released when it ends
		t1 := time.Now()
		draft := seq.Propose(out[len(out)-1], greedy)
		if draft.Len() != B || draft.IDs == nil && draft.Vocab != V {
			panic(fmt.Sprintf("spec: drafter returned %d rows of %d ids and %d logits for a block of %d × vocab %d", draft.Len(), len(draft.IDs), len(draft.Logits), B, V))
		}
		block := make([]int32, n)
		block[0] = out[len(out)-1]
		for s := 1; s < n; s++ {
			block[s] = pick(draft, s)
		}
		t2 := time.Now()
		vl, vh := target.Decode(b, cache, block, states)
		accepted, next := verify(model.ReadRows(b, vl, greedy), draft, block, o, rng)
		st.DraftSeconds += t2.Sub(t1).Seconds()
		st.VerifySeconds += time.Since(t2).Seconds()
		st.Rounds++
		st.Histogram[accepted]++
		for s := 1; s < n && s <= accepted+1; s++ {
			st.SlotTried[s-1]++
			if s <= accepted {
				st.SlotAccepted[s-1]++
			}
		}
		for _, x := range append(block[1:accepted+1], next) {
			if done(out, maxNew, o.Stop) {
				break
			}
			out = append(out, x)
		}
		if !done(out, maxNew, o.Stop) { // roll back the rejected drafts; the accepted positions join the context
			cache.Truncate(start + accepted + 1)
			seq.Extend(taps(vh, states, 0, accepted+1))
		}
		b.ReleaseStep(m)
	}
	st.Tokens = len(out)
	return out, st, nil
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
