package dflash

import (
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestBackwardWritesFreshGradients: the drafter's backward pass on step
// memory gives each activation its gradient unzeroed (Tape.GradDst: the
// first step to reach it writes it, over NaN on this backend), so the only
// zeroed allocation it makes is the cross-entropy's hidden-state gradient,
// which AxpyBy can only add to. Its parameter gradients match the float64
// CPU path's (itself checked against finite differences by
// TestFiniteDifferences) within float32 rounding: measured rel err about
// 1e-6 over seeds, asserted below 1e-4.
func TestBackwardWritesFreshGradients(t *testing.T) {
	seed := testseed.Seed(t)
	d, head, bat, bl := randomSetup[float32](t, seed)
	b := backendtest.NewStepCPU(2)
	in, err := d.Inputs(b, bat, bl)
	if err != nil {
		t.Fatal(err)
	}
	tp := tensor.NewTape(b)
	tp.ReleaseGrads()
	out := d.ForwardInputs(tp, true, head, in)
	allocs, zeroed := b.Allocs, b.Zeroed
	tp.Backward(out.Loss)
	grads, zeros := b.Allocs-allocs, b.Zeroed-zeroed
	t.Logf("backward: %d allocations, %d of them zeroed", grads, zeros)
	if grads < 20 {
		t.Fatalf("backward made %d allocations: the drafter has more activation gradients than that", grads)
	}
	if zeros != 1 {
		t.Errorf("backward made %d zeroed allocations, want 1 (the cross-entropy's hidden-state gradient)", zeros)
	}

	d64, head64, bat64, bl64 := randomSetup[float64](t, seed)
	_, want := lossAndGrads(t, 2, d64, head64, bat64, bl64)
	var worst float64
	for i, p := range d.Params() {
		got := make([]float64, p.Numel())
		for j, v := range p.Grad() {
			got[j] = float64(v)
		}
		e := relErr(got, want[i])
		if e > 1e-4 {
			t.Errorf("%s: gradient rel err %.2e against float64", p.Name, e)
		}
		worst = max(worst, e)
	}
	t.Logf("largest gradient rel err against float64: %.2e", worst)
	b.ResetStep()
}
