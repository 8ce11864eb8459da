package tensor_test

import (
	"math"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// TestXentRows checks the compaction of cross-entropy rows against its
// definition, row by row: active when the target is ≥ 0 and the weight
// > 0, with the row's target, weight and share w/Σw (Σ over active rows in
// float64); and that LMHeadXentRows on them gives LMHeadXent's loss and
// per-row results bit for bit.
func TestXentRows(t *testing.T) {
	rng := testseed.New(t)
	const n, vocab, hid = 41, 13, 6
	targets := make([]int32, n)
	weights := make([]float64, n)
	for i := range targets {
		targets[i] = int32(rng.IntN(vocab+4)) - 4 // about a quarter ignored
		if rng.IntN(5) > 0 {
			weights[i] = rng.Float64()
		}
	}
	cpu := tensor.NewCPU[float32](2)
	rows := tensor.NewXentRows(cpu, targets, weights)
	var sum float64
	j := 0
	for i := range n {
		if targets[i] < 0 || weights[i] <= 0 {
			continue
		}
		if j >= len(rows.Active) || rows.Active[j] != int32(i) || rows.Targets[j] != targets[i] || rows.Weights[j] != weights[i] {
			t.Fatalf("active row %d: got row %v target %v weight %v, want row %d target %d weight %v", j, rows.Active[j], rows.Targets[j], rows.Weights[j], i, targets[i], weights[i])
		}
		sum += weights[i]
		j++
	}
	if j != len(rows.Active) || rows.N != n || rows.WeightSum != sum {
		t.Fatalf("%d active rows of %d (weight sum %v), want %d (weight sum %v)", len(rows.Active), rows.N, rows.WeightSum, j, sum)
	}
	for j, i := range rows.Active {
		if want := float32(weights[i] / sum); tensor.HostData(rows.Scale, "scale")[j] != want {
			t.Fatalf("row %d share %v, want %v", i, tensor.HostData(rows.Scale, "scale")[j], want)
		}
	}
	h, w := tensor.New[float32]("h", n, hid), tensor.New[float32]("w", vocab, hid)
	h.FillNormal(rng, 0, 1)
	w.FillNormal(rng, 0, 1)
	tp := tensor.NewInference[float32](cpu)
	a, b := tp.LMHeadXentRows(h, w, rows, 5), tp.LMHeadXent(h, w, targets, weights, 5)
	if math.Float32bits(a.Loss.Data()[0]) != math.Float32bits(b.Loss.Data()[0]) {
		t.Fatalf("loss %v from the rows, %v from targets and weights", a.Loss.Data()[0], b.Loss.Data()[0])
	}
	al, am := a.Read(cpu)
	bl, bm := b.Read(cpu)
	for i := range n {
		if al[i] != bl[i] || am[i] != bm[i] {
			t.Fatalf("row %d: %v/%d from the rows, %v/%d from targets and weights", i, al[i], am[i], bl[i], bm[i])
		}
	}
}
