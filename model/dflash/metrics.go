package dflash

import (
	"fmt"
)

// Metrics accumulates the evaluation numbers of docs/DRAFTER.md §5 over
// batches: the weighted loss, per-slot accuracy and simulated acceptance
// length.
type Metrics struct {
	B           int
	LossSum     float64 // Σ v·w·CE
	WeightSum   float64 // Σ v·w
	SlotCorrect []int64 // [B], slot 0 unused
	SlotTotal   []int64
	TauSum      float64
	Blocks      int64 // live blocks
}

// NewMetrics returns empty metrics for block size b.
func NewMetrics(b int) *Metrics {
	return &Metrics{B: b, SlotCorrect: make([]int64, b), SlotTotal: make([]int64, b)}
}

// Add accumulates the blocks of one batch given the greedy predictions
// pred [Rows*N*B] and the per-slot cross-entropy ce [Rows*N*B] (ce may be
// nil; it is read only where a label is valid).
func (m *Metrics) Add(bl *Blocks, pred []int32, ce []float64) {
	if len(pred) != len(bl.Labels) || (ce != nil && len(ce) != len(bl.Labels)) {
		panic(fmt.Sprintf("dflash: Metrics.Add: %d predictions, %d ce for %d slots", len(pred), len(ce), len(bl.Labels)))
	}
	if bl.B != m.B {
		panic(fmt.Sprintf("dflash: Metrics.Add: block size %d, metrics for %d", bl.B, m.B))
	}
	tau := BlockAcceptance(bl, pred)
	for r := 0; r < bl.Rows; r++ {
		for j := 0; j < int(bl.NumValid[r]); j++ {
			base := (r*bl.N + j) * bl.B
			for s := 1; s < bl.B; s++ {
				i := base + s
				lab := bl.Labels[i]
				if lab < 0 {
					continue
				}
				m.SlotTotal[s]++
				if pred[i] == lab {
					m.SlotCorrect[s]++
				}
				if ce != nil {
					m.LossSum += bl.Weights[i] * ce[i]
					m.WeightSum += bl.Weights[i]
				}
			}
			m.TauSum += float64(tau[r*bl.N+j])
			m.Blocks++
		}
	}
}

// BlockAcceptance returns the simulated acceptance length of every block
// (§5), [Rows*N]: 1 + the number of leading slots s ≥ 1 with a valid label
// predicted right; 0 for dead blocks.
func BlockAcceptance(bl *Blocks, pred []int32) []int {
	tau := make([]int, bl.Rows*bl.N)
	for r := 0; r < bl.Rows; r++ {
		for j := 0; j < int(bl.NumValid[r]); j++ {
			base := (r*bl.N + j) * bl.B
			run := 0
			for s := 1; s < bl.B && bl.Labels[base+s] >= 0 && pred[base+s] == bl.Labels[base+s]; s++ {
				run++
			}
			tau[r*bl.N+j] = 1 + run
		}
	}
	return tau
}

// Loss returns the weighted mean cross-entropy (§4.4); 0 with no label.
func (m *Metrics) Loss() float64 {
	if m.WeightSum == 0 {
		return 0
	}
	return m.LossSum / m.WeightSum
}

// SlotAccuracy returns acc_s for s = 1..B-1 (index s; index 0 is 0).
func (m *Metrics) SlotAccuracy() []float64 {
	a := make([]float64, m.B)
	for s := 1; s < m.B; s++ {
		if m.SlotTotal[s] > 0 {
			a[s] = float64(m.SlotCorrect[s]) / float64(m.SlotTotal[s])
		}
	}
	return a
}

// Accuracy returns the accuracy over all valid slots.
func (m *Metrics) Accuracy() float64 {
	var c, t int64
	for s := 1; s < m.B; s++ {
		c += m.SlotCorrect[s]
		t += m.SlotTotal[s]
	}
	if t == 0 {
		return 0
	}
	return float64(c) / float64(t)
}

// Acceptance returns the mean simulated acceptance length τ over live
// blocks (1 means no draft token accepted; B is the maximum).
func (m *Metrics) Acceptance() float64 {
	if m.Blocks == 0 {
		return 0
	}
	return m.TauSum / float64(m.Blocks)
}
