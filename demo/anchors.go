package demo

import (
	"slices"

	"dflash/model/dflash"
	"dflash/tensor"
)

// anchorAcceptance explains real against simulated acceptance
// (docs/DRAFTER.md §7.1) on held-out conversations whose responses are the
// target's greedy output: it scores the drafter at every anchor of every
// response and returns the arithmetic mean of the per-anchor acceptance
// lengths (the simulated τ with all anchors instead of a sample) and the
// mean that real decoding's walk a → a + τ(a) from the first response
// token gives (tokens per round: what real greedy decoding measures, up to
// the response's end).
func anchorAcceptance(s *dflash.Session, eval []dflash.Example) (all, walk float64, err error) {
	var sum, n, tokens, rounds int
	for _, e := range eval {
		b := dflash.MakeBatch([]dflash.Example{e}, []int{0}, s.Pad)
		if err := s.Hidden(b); err != nil {
			return 0, 0, err
		}
		cands := dflash.Candidates(b.LossMask, b.SeqLen[0])
		if len(cands) == 0 {
			continue
		}
		bl := dflash.BuildBlocks(s.Drafter.Cfg, b, [][]int32{cands})
		out, err := s.Drafter.Forward(tensor.NewInference(s.Backend), false, s.Head, b, bl)
		s.Backend.ResetStep() // Forward read what it returns to host memory
		if err != nil {
			return 0, 0, err
		}
		tau := dflash.BlockAcceptance(bl, out.Pred)
		at := map[int32]int{}
		for j, a := range cands {
			at[a] = tau[j]
			sum += tau[j]
			n++
		}
		for a := int32(slices.Index(e.Mask, 1)); at[a] > 0; a += int32(at[a]) {
			tokens += at[a]
			rounds++
		}
	}
	if n == 0 || rounds == 0 {
		return 0, 0, nil
	}
	return float64(sum) / float64(n), float64(tokens) / float64(rounds), nil
}
