package dflash

import (
	"math"
	"slices"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// TestInputsAssembledOnce checks that a step's inputs are read-only for the
// forward pass: two training passes over one StepInputs give bit-identical
// losses, predictions and gradients, equal to Forward's (which assembles its
// own), and leave the tapped hidden states, rotary tables and loss rows as
// they were. It also checks the assembled pieces against their definitions:
// the context rotary table holds positions 0..S−1 of every row, the loss
// rows are the labelled slots with their weights.
func TestInputsAssembledOnce(t *testing.T) {
	rng := testseed.New(t)
	d, head, b, bl := randomDrafter[float32](rng, 37, []int{37, 30, 22}, 7)
	cpu := tensor.NewCPU[float32](2)
	in, err := d.Inputs(cpu, b, bl)
	if err != nil {
		t.Fatal(err)
	}
	hidden := make([][]float32, len(b.Taps))
	for i, h := range b.Taps {
		hidden[i] = slices.Clone(h.Data())
	}
	ctxCos, qSin := tensor.HostData(in.CtxRope.Cos, "cos"), tensor.HostData(in.QRope.Sin, "sin")
	cos, sin := slices.Clone(ctxCos), slices.Clone(qSin)
	active := slices.Clone(in.Loss.Active)
	type result struct {
		loss  float32
		pred  []int32
		grads []float32
	}
	run := func(forward func(tp *tensor.Tape) *Output[float32]) result {
		d.Arena().ZeroGrad()
		tp := tensor.NewTape(cpu)
		out := forward(tp)
		tp.Backward(out.Loss)
		out.Read(cpu)
		return result{out.Loss.Data()[0], out.Pred, slices.Clone(d.Arena().HostGrad())}
	}
	viaInputs := func(tp *tensor.Tape) *Output[float32] { return d.ForwardInputs(tp, true, head, in) }
	results := []result{run(viaInputs), run(viaInputs), run(func(tp *tensor.Tape) *Output[float32] {
		out, err := d.Forward(tp, true, head, b, bl)
		if err != nil {
			t.Fatal(err)
		}
		return out
	})}
	for k, r := range results[1:] {
		if math.Float32bits(r.loss) != math.Float32bits(results[0].loss) || !slices.Equal(r.pred, results[0].pred) {
			t.Fatalf("pass %d: loss %v, first pass %v (or predictions differ)", k+2, r.loss, results[0].loss)
		}
		for i, g := range r.grads {
			if math.Float32bits(g) != math.Float32bits(results[0].grads[i]) {
				t.Fatalf("pass %d: flat gradient[%d] = %v, first pass %v", k+2, i, g, results[0].grads[i])
			}
		}
	}
	for i := range hidden {
		if !slices.Equal(hidden[i], b.Taps[i].Data()) || !slices.Equal(hidden[i], in.Taps[i].Data()) {
			t.Fatalf("tap %d changed during the forward passes", i)
		}
	}
	if !slices.Equal(cos, ctxCos) || !slices.Equal(sin, qSin) || !slices.Equal(active, in.Loss.Active) {
		t.Fatal("rotary tables or loss rows changed during the forward passes")
	}
	// Context positions: row r*S+i is position i, so its first angle is i·InvFreq[0] = i.
	h := d.Cfg.HeadDim / 2
	for r := range b.Rows {
		for i := range b.Len {
			if want := float32(math.Cos(float64(i))); math.Abs(float64(ctxCos[(r*b.Len+i)*h]-want)) > 1e-6 {
				t.Fatalf("context rotary row %d of sequence %d: cos %v, want cos(%d) = %v", i, r, ctxCos[(r*b.Len+i)*h], i, want)
			}
		}
	}
	var want []int32
	for i, l := range bl.Labels {
		if l >= 0 && bl.Weights[i] > 0 {
			want = append(want, int32(i))
		}
	}
	if !slices.Equal(in.Loss.Active, want) || in.Loss.WeightSum != bl.WeightSum {
		t.Fatalf("loss rows %v (weight sum %v), labelled slots %v (weight sum %v)", in.Loss.Active, in.Loss.WeightSum, want, bl.WeightSum)
	}
}
