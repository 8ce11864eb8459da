package tensor_test

import (
	"math"
	"math/rand/v2"
	"slices"
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

// TestXentRowsFixed: keeping every row (NewXentRowsFixed) gives the loss,
// per-row results and gradients of the compacted rows, and its shapes do not
// depend on which rows carry labels.
func TestXentRowsFixed(t *testing.T) {
	rng := testseed.New(t)
	const n, vocab, hid = 37, 11, 5
	cpu := tensor.NewCPU[float64](1)
	targets := make([]int32, n)
	weights := make([]float64, n)
	for i := range targets {
		targets[i] = int32(rng.IntN(vocab+5)) - 5
		weights[i] = float64(rng.IntN(3)) * rng.Float64()
	}
	run := func(rows *tensor.XentRows[float64]) (float64, []float64, []int32, []float64, []float64) {
		h, w := tensor.New[float64]("h", n, hid), tensor.New[float64]("w", vocab, hid)
		r := rand.New(rand.NewPCG(7, 7))
		h.FillNormal(r, 0, 1)
		w.FillNormal(r, 0, 1)
		h.RequiresGrad, w.RequiresGrad = true, true
		tp := tensor.NewTape[float64](cpu)
		x := tp.LMHeadXentRows(h, w, rows, 4)
		tp.Backward(x.Loss)
		rl, am := x.Read(cpu)
		return x.Loss.Data()[0], rl, am, h.Grad(), w.Grad()
	}
	fixed := tensor.NewXentRowsFixed(cpu, targets, weights, nil)
	if len(fixed.Active) != n || fixed.DevTargets.Len() != n || fixed.Scale.Len() != n {
		t.Fatalf("fixed rows: %d active, %d targets, %d shares, want %d each", len(fixed.Active), fixed.DevTargets.Len(), fixed.Scale.Len(), n)
	}
	// Rows that can never be labelled (here every third, whose labels are
	// cleared) are left out of the fixed rows and change nothing.
	never := func(i int) bool { return i%3 == 0 }
	for i := range targets {
		if never(i) {
			targets[i] = -1
		}
	}
	some := tensor.NewXentRowsFixed(cpu, targets, weights, func(i int) bool { return !never(i) })
	if want := n - (n+2)/3; len(some.Active) != want {
		t.Fatalf("fixed rows of candidates: %d active, want %d", len(some.Active), want)
	}
	ls, rls, ams, dhs, dws := run(some)
	l1, rl1, am1, dh1, dw1 := run(tensor.NewXentRows(cpu, targets, weights))
	l2, rl2, am2, dh2, dw2 := run(tensor.NewXentRowsFixed(cpu, targets, weights, nil))
	if math.Abs(l1-l2) > 1e-12*math.Abs(l1) || !slices.Equal(rl1, rl2) || !slices.Equal(am1, am2) ||
		math.Abs(l1-ls) > 1e-12*math.Abs(l1) || !slices.Equal(rl1, rls) || !slices.Equal(am1, ams) {
		t.Fatalf("loss %v compacted, %v fixed, %v fixed over candidates, or per-row results differ", l1, l2, ls)
	}
	for _, g := range [][2][]float64{{dh1, dh2}, {dw1, dw2}, {dh1, dhs}, {dw1, dws}} {
		for i := range g[0] {
			if math.Abs(g[0][i]-g[1][i]) > 1e-12 {
				t.Fatalf("gradient %d: %v compacted, %v fixed", i, g[0][i], g[1][i])
			}
		}
	}
}
