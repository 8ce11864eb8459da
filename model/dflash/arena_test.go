package dflash

import (
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// TestDrafterArena checks that the drafter's parameters and their
// gradients after a training step are views of the drafter's one arena
// (what the optimizer updates), at running offsets in Params order.
func TestDrafterArena(t *testing.T) {
	rng := testseed.New(t)
	d, head, b, bl := randomDrafter[float32](rng, 40, []int{40, 31}, 6)
	tp := tensor.NewTape(tensor.NewCPU[float32](1))
	out, err := d.Forward(tp, true, head, b, bl)
	if err != nil {
		t.Fatal(err)
	}
	tp.Backward(out.Loss)
	a := d.Arena()
	off := 0
	for _, p := range d.Params() {
		if &p.Data()[0] != &a.HostValues()[off] || &p.Grad()[0] != &a.HostGrad()[off] {
			t.Fatalf("%s is not the arena's range at offset %d", p.Name, off)
		}
		off += p.Numel()
	}
	if off != len(a.HostValues()) || off != len(a.HostGrad()) {
		t.Fatalf("parameters cover %d elements, arena %d (gradient %d)", off, len(a.HostValues()), len(a.HostGrad()))
	}
	var nonzero bool
	for _, g := range a.HostGrad() {
		nonzero = nonzero || g != 0
	}
	if !nonzero {
		t.Fatal("the backward pass left the arena's gradient zero")
	}
}
