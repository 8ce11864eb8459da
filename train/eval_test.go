package train

import (
	"math"
	"testing"
	"time"
)

func TestBlockStatsCases(t *testing.T) {
	T, F := true, false
	cases := []struct {
		name        string
		pred, label []int32
		valid       []bool
		wantTau     float64 // NaN: block not counted
		wantCorrect []int64
	}{
		{"all-accepted", []int32{9, 1, 2, 3}, []int32{0, 1, 2, 3}, []bool{F, T, T, T}, 4, []int64{0, 1, 1, 1}},
		{"first-wrong", []int32{9, 5, 2, 3}, []int32{0, 1, 2, 3}, []bool{F, T, T, T}, 1, []int64{0, 0, 1, 1}},
		{"middle-wrong", []int32{9, 1, 5, 3}, []int32{0, 1, 2, 3}, []bool{F, T, T, T}, 2, []int64{0, 1, 0, 1}},
		{"invalid-stops-prefix", []int32{9, 1, 2, 3}, []int32{0, 1, 2, 3}, []bool{T, T, F, T}, 2, []int64{0, 1, 0, 1}},
		{"slot1-invalid-not-counted", []int32{9, 1, 2, 3}, []int32{0, 1, 2, 3}, []bool{T, F, T, T}, math.NaN(), []int64{0, 0, 1, 1}},
		{"slot0-ignored", []int32{7, 1, 2, 9}, []int32{0, 1, 2, 3}, []bool{T, T, T, T}, 3, []int64{0, 1, 1, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewBlockStats(4)
			s.AddBlock(c.pred, c.label, c.valid, nil)
			if got := s.Tau(); !(got == c.wantTau || math.IsNaN(got) && math.IsNaN(c.wantTau)) {
				t.Errorf("tau %g, want %g", got, c.wantTau)
			}
			for k := range 4 {
				if s.Correct[k] != c.wantCorrect[k] {
					t.Errorf("correct %v, want %v", s.Correct, c.wantCorrect)
					break
				}
			}
		})
	}
}

// TestBlockStatsRandom compares aggregation over random blocks with a direct
// computation over the stored blocks.
func TestBlockStatsRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := NewRNG(seed, 0)
	const B, n = 8, 500
	type blk struct {
		pred, label []int32
		valid       []bool
		loss        []float32
	}
	var blocks []blk
	a, b := NewBlockStats(B), NewBlockStats(B)
	for i := range n {
		var x blk
		p := 0.3 + 0.6*r.Float64() // per-block chance of a right token
		for range B {
			l := int32(r.IntN(50))
			pr := l
			if r.Float64() > p {
				pr = l + 1
			}
			x.label, x.pred = append(x.label, l), append(x.pred, pr)
			x.valid = append(x.valid, r.Float64() < 0.9)
			x.loss = append(x.loss, float32(r.ExpFloat64()))
		}
		blocks = append(blocks, x)
		if i%2 == 0 {
			a.AddBlock(x.pred, x.label, x.valid, x.loss)
		} else {
			b.AddBlock(x.pred, x.label, x.valid, x.loss)
		}
	}
	a.Merge(b)
	// Direct computation.
	var tauSum, counted float64
	correct, valid := make([]float64, B), make([]float64, B)
	lossSum := make([]float64, B)
	for _, x := range blocks {
		if x.valid[1] {
			acc := 0
			for acc+1 < B && x.valid[acc+1] && x.pred[acc+1] == x.label[acc+1] {
				acc++
			}
			tauSum += float64(acc + 1)
			counted++
		}
		for k := 1; k < B; k++ {
			if x.valid[k] {
				valid[k]++
				lossSum[k] += float64(x.loss[k])
				if x.pred[k] == x.label[k] {
					correct[k]++
				}
			}
		}
	}
	near := func(what string, got, want float64) {
		if math.Abs(got-want) > 1e-9*(1+math.Abs(want)) {
			t.Errorf("%s = %g, want %g", what, got, want)
		}
	}
	near("tau", a.Tau(), tauSum/counted)
	var c, v, l float64
	for k := 1; k < B; k++ {
		near("slot accuracy", a.SlotAccuracy()[k], correct[k]/valid[k])
		near("slot loss", a.SlotLoss()[k], lossSum[k]/valid[k])
		c, v, l = c+correct[k], v+valid[k], l+lossSum[k]
	}
	near("accuracy", a.Accuracy(), c/v)
	near("loss", a.Loss(), l/v)
	w := make([]float64, B)
	var num, den float64
	for k := 1; k < B; k++ {
		w[k] = math.Exp(-float64(k-1) / 4)
		num += w[k] * lossSum[k]
		den += w[k] * valid[k]
	}
	near("weighted loss", a.WeightedLoss(w), num/den)
	m := a.Metrics()
	near("metrics tau", m["tau"], a.Tau())
	near("metrics acc_3", m["acc_3"], correct[3]/valid[3])
	if _, ok := m["acc_0"]; ok {
		t.Error("slot 0 reported")
	}
}
