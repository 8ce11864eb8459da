package spec

import (
	"math/rand/v2"

	"dflash/model"
)

// verify applies the acceptance rule to a verified block: block[0] is the
// last accepted token and block[1:] the drafts, target holds the target's
// rows of every block position [n, V] (row k−1 is the target's
// distribution p_k of the token at block position k) and draft the
// drafter's rows [B, V] (row k its q_k). It returns the number of drafts
// accepted and the token that follows them.
//
// Greedy (o.Temperature ≤ 0): draft k is accepted while it equals
// argmax p_k; the next token is the argmax after the last accepted one.
// Only the target's argmaxes are read (its IDs), not the drafter's rows.
// Sampling: draft x_k is accepted with probability min(1, p_k(x_k)/q_k(x_k));
// the first rejected position takes a draw from norm(max(0, p_k − q_k)); when
// every draft is accepted the bonus token is drawn from p_n. The drafts
// must have been drawn from q_k (the same temperature and top-k), and both
// rows hold logits.
func verify(target, draft model.Rows, block []int32, o Options, rng *rand.Rand) (int, int32) {
	n := len(block)
	if o.Temperature <= 0 {
		for k := 1; k < n; k++ {
			if want := target.Pick(k-1, 0, 0, nil); block[k] != want {
				return k - 1, want
			}
		}
		return n - 1, target.Pick(n-1, 0, 0, nil)
	}
	for k := 1; k < n; k++ {
		p := model.Probs(target.Row(k-1), o.Temperature, o.TopK)
		q := model.Probs(draft.Row(k), o.Temperature, o.TopK)
		x := block[k]
		if rng.Float64()*q[x] < p[x] { // probability min(1, p/q); q[x] > 0 since x was drawn from q
			continue
		}
		var z float64
		for i := range p {
			p[i] = max(0, p[i]-q[i])
			z += p[i]
		}
		if z <= 0 { // p ≤ q everywhere only by rounding: p = q
			return k - 1, model.SampleProbs(model.Probs(target.Row(k-1), o.Temperature, o.TopK), rng)
		}
		for i := range p {
			p[i] /= z
		}
		return k - 1, model.SampleProbs(p, rng)
	}
	return n - 1, model.SampleProbs(model.Probs(target.Row(n-1), o.Temperature, o.TopK), rng)
}
