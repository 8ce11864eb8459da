package train

import (
	"fmt"
	"math"
)

// BlockStats aggregates evaluation over draft blocks of size B. Slot 0 of a block
// holds the known anchor token; slots k = 1..B-1 are predictions of the tokens at
// anchor+k, compared with labels (the target's tokens).
//
// Per-slot accuracy is correct_k / valid_k. Loss is the mean per-slot cross-entropy
// over valid slots (unweighted; WeightedLoss applies slot weights).
//
// Simulated acceptance length: for each block, accepted is the number of leading
// slots k = 1, 2, ... that are valid and whose prediction equals the label, stopping
// at the first mismatch or invalid slot (at most B-1), and tau = accepted + 1 (the
// verifier always contributes one token). Tau() is the mean of tau over the blocks
// whose slot 1 is valid; a block with nothing to verify is not counted. This is the
// acceptance length of greedy verification when the drafter's per-slot predictions
// are its argmax and the target's greedy tokens are the labels.
type BlockStats struct {
	B          int
	Blocks     int64     // blocks counted for tau
	Correct    []int64   // per slot: valid predictions equal to the label
	Valid      []int64   // per slot: valid slots
	LossSum    []float64 // per slot: sum of cross-entropy over valid slots
	LossCount  []int64   // per slot: slots with a loss given
	AcceptHist []int64   // AcceptHist[a]: blocks that accepted a draft tokens, a = 0..B-1
}

// NewBlockStats returns empty statistics for blocks of size b (b >= 2).
func NewBlockStats(b int) *BlockStats {
	if b < 2 {
		panic(fmt.Sprintf("train: NewBlockStats: block size %d < 2", b))
	}
	return &BlockStats{B: b, Correct: make([]int64, b), Valid: make([]int64, b),
		LossSum: make([]float64, b), LossCount: make([]int64, b), AcceptHist: make([]int64, b)}
}

// AddBlock records one block. pred, label and valid have length B (slot 0 ignored);
// loss, when not nil, gives the cross-entropy of each slot (read for valid slots only).
func (s *BlockStats) AddBlock(pred, label []int32, valid []bool, loss []float32) {
	if len(pred) != s.B || len(label) != s.B || len(valid) != s.B || loss != nil && len(loss) != s.B {
		panic(fmt.Sprintf("train: AddBlock: block size %d, got pred %d label %d valid %d loss %d", s.B, len(pred), len(label), len(valid), len(loss)))
	}
	accepted, run := 0, true
	for k := 1; k < s.B; k++ {
		if !valid[k] {
			run = false
			continue
		}
		s.Valid[k]++
		ok := pred[k] == label[k]
		if ok {
			s.Correct[k]++
		}
		if run && ok {
			accepted++
		} else {
			run = false
		}
		if loss != nil {
			s.LossSum[k] += float64(loss[k])
			s.LossCount[k]++
		}
	}
	if valid[1] {
		s.Blocks++
		s.AcceptHist[accepted]++
	}
}

// Merge adds o's counts into s (same block size).
func (s *BlockStats) Merge(o *BlockStats) {
	if o.B != s.B {
		panic(fmt.Sprintf("train: Merge: block sizes %d and %d", s.B, o.B))
	}
	s.Blocks += o.Blocks
	for k := range s.B {
		s.Correct[k] += o.Correct[k]
		s.Valid[k] += o.Valid[k]
		s.LossSum[k] += o.LossSum[k]
		s.LossCount[k] += o.LossCount[k]
		s.AcceptHist[k] += o.AcceptHist[k]
	}
}

// Accuracy returns correct/valid over all predicted slots (NaN when none).
func (s *BlockStats) Accuracy() float64 {
	var c, n int64
	for k := 1; k < s.B; k++ {
		c += s.Correct[k]
		n += s.Valid[k]
	}
	return ratio(float64(c), n)
}

// SlotAccuracy returns the accuracy of each slot; index 0 is NaN.
func (s *BlockStats) SlotAccuracy() []float64 {
	out := make([]float64, s.B)
	out[0] = math.NaN()
	for k := 1; k < s.B; k++ {
		out[k] = ratio(float64(s.Correct[k]), s.Valid[k])
	}
	return out
}

// Loss returns the mean cross-entropy over all slots with a loss (NaN when none).
func (s *BlockStats) Loss() float64 {
	var sum float64
	var n int64
	for k := 1; k < s.B; k++ {
		sum += s.LossSum[k]
		n += s.LossCount[k]
	}
	return ratio(sum, n)
}

// SlotLoss returns each slot's mean cross-entropy; index 0 is NaN.
func (s *BlockStats) SlotLoss() []float64 {
	out := make([]float64, s.B)
	out[0] = math.NaN()
	for k := 1; k < s.B; k++ {
		out[k] = ratio(s.LossSum[k], s.LossCount[k])
	}
	return out
}

// WeightedLoss returns sum_k w[k]*LossSum[k] / sum_k w[k]*LossCount[k] over k >= 1,
// the loss as training weighs it (w[k] = exp(-(k-1)/gamma) for DFlash).
func (s *BlockStats) WeightedLoss(w []float64) float64 {
	var num, den float64
	for k := 1; k < s.B; k++ {
		num += w[k] * s.LossSum[k]
		den += w[k] * float64(s.LossCount[k])
	}
	if den == 0 {
		return math.NaN()
	}
	return num / den
}

// Tau returns the mean simulated acceptance length (NaN when no block was counted).
func (s *BlockStats) Tau() float64 {
	var sum float64
	for a, n := range s.AcceptHist {
		sum += float64(a+1) * float64(n)
	}
	return ratio(sum, s.Blocks)
}

// Metrics returns "loss", "acc", "tau", "blocks" and per-slot "acc_<k>" and
// "loss_<k>" (k = 1..B-1), leaving out undefined (NaN) values.
func (s *BlockStats) Metrics() map[string]float64 {
	m := map[string]float64{"blocks": float64(s.Blocks)}
	put := func(k string, v float64) {
		if !math.IsNaN(v) {
			m[k] = v
		}
	}
	put("loss", s.Loss())
	put("acc", s.Accuracy())
	put("tau", s.Tau())
	acc, loss := s.SlotAccuracy(), s.SlotLoss()
	for k := 1; k < s.B; k++ {
		put(fmt.Sprintf("acc_%d", k), acc[k])
		put(fmt.Sprintf("loss_%d", k), loss[k])
	}
	return m
}

func ratio(a float64, n int64) float64 {
	if n == 0 {
		return math.NaN()
	}
	return a / float64(n)
}
