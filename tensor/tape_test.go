package tensor_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// releaseNet is a small graph over most ops: a view (Reshape) whose input
// is read by another op too, a tensor consumed twice (Add), Concat, Slice,
// Transpose12, RMSNorm, SwiGLU, Scale and the chunked cross-entropy.
type releaseNet struct {
	w1, w2, norm, head *tensor.Tensor
	x                  []float32
	targets            []int32
}

const relRows, relIn, relHid, relVocab = 6, 8, 4, 11

func newReleaseNet(rng *rand.Rand) *releaseNet {
	n := &releaseNet{
		w1: tensor.New[float32]("w1", 2*relHid, relIn), w2: tensor.New[float32]("w2", relHid, relHid),
		norm: tensor.New[float32]("norm", relHid), head: tensor.New[float32]("head", relVocab, relHid),
		x: make([]float32, relRows*relIn), targets: make([]int32, 2*relRows),
	}
	for _, p := range []*tensor.Tensor{n.w1, n.w2, n.norm, n.head} {
		p.FillNormal(rng, 0.1, 0.5)
		p.RequiresGrad = true
	}
	for i := range n.x {
		n.x[i] = float32(rng.NormFloat64())
	}
	for i := range n.targets {
		n.targets[i] = int32(rng.IntN(relVocab))
	}
	return n
}

// forward returns the loss and the intermediates whose gradients a test reads.
func (n *releaseNet) forward(tp *tensor.Tape) (loss, hidden, view *tensor.Tensor) {
	b := tp.Backend()
	x := tensor.FromStorage("x", b.Upload(n.x, false), relRows, relIn)
	h := tp.Linear(x, n.w1, nil)                // [6, 8]
	v := tp.Reshape(h, 2, relRows/2, 2, relHid) // a view of h
	tr := tp.Transpose12(v)                     // [2, 2, 3, 4]
	flat := tp.Reshape(tr, relRows*2, relHid)   // [12, 4]
	gate := tp.Slice(h, 1, 0, relHid)           // h read again
	up := tp.Slice(h, 1, relHid, 2*relHid)
	act := tp.SwiGLU(gate, up) // [6, 4]
	mixed := tp.Linear(act, n.w2, nil)
	both := tp.Concat(0, mixed, mixed) // consumed twice
	sum := tp.Add(both, tp.Scale(flat, 0.5))
	out := tp.RMSNorm(sum, n.norm, 1e-6)
	xe := tp.LMHeadXent(out, n.head, n.targets, nil, 5)
	return tp.Scale(xe.Loss, 0.7), sum, v
}

// TestReleaseGrads: on a backend with step memory, a tape that releases
// gradients computes the same loss and parameter gradients bit for bit as
// one that does not (freed memory is poisoned with NaN and reused, so a
// read after release would show), gives back every activation gradient
// but the kept ones and the loss's, and holds less memory at once; a kept
// gradient, that of a view's source included, is the one computed without
// release. On the plain CPU backend ReleaseGrads changes nothing.
func TestReleaseGrads(t *testing.T) {
	n := newReleaseNet(testseed.New(t))
	type result struct {
		loss        float32
		grads       [][]float32
		hidden, src []float32 // kept gradients
		viewGrad    bool      // the view's own gradient survived
		peak, frees int
	}
	run := func(b tensor.Backend[float32], release bool) result {
		tp := tensor.NewTape(b)
		if release {
			tp.ReleaseGrads()
		}
		loss, hidden, view := n.forward(tp)
		if release {
			tp.KeepGrad(hidden)
		}
		tp.Backward(loss)
		var r result
		r.loss = tensor.HostData(loss.Store, "loss")[0]
		for _, p := range []*tensor.Tensor{n.w1, n.w2, n.norm, n.head} {
			r.grads = append(r.grads, slices.Clone(p.Grad()))
			p.DropGrad()
		}
		r.hidden = slices.Clone(tensor.HostData(hidden.GradStore, "hidden grad"))
		r.viewGrad = view.GradStore != nil
		if s, ok := b.(*backendtest.StepCPU); ok {
			r.peak, r.frees = s.Peak, s.Frees
			if loss.GradStore == nil {
				t.Error("the loss's gradient was released")
			}
		}
		return r
	}
	same := func(what string, a, b []float32) {
		t.Helper()
		if len(a) != len(b) {
			t.Fatalf("%s: %d values, want %d", what, len(a), len(b))
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s[%d] = %g with release, %g without", what, i, a[i], b[i])
			}
		}
	}
	off := run(backendtest.NewStepCPU(1), false)
	on := run(backendtest.NewStepCPU(1), true)
	cpuOff := run(tensor.NewCPU[float32](1), false)
	cpuOn := run(tensor.NewCPU[float32](1), true)
	for _, c := range []struct {
		name string
		r    result
	}{{"step memory, release", on}, {"CPU", cpuOff}, {"CPU, release", cpuOn}} {
		if math.IsNaN(float64(c.r.loss)) || c.r.loss != off.loss {
			t.Fatalf("%s: loss %g, without release on step memory %g", c.name, c.r.loss, off.loss)
		}
		for i := range off.grads {
			same(c.name+" parameter gradient", c.r.grads[i], off.grads[i])
		}
		same(c.name+" kept gradient", c.r.hidden, off.hidden)
	}
	if on.viewGrad || !off.viewGrad || !cpuOn.viewGrad {
		t.Errorf("the view's gradient survives: %v with release, %v without, %v on the CPU with release; want false, true, true", on.viewGrad, off.viewGrad, cpuOn.viewGrad)
	}
	if off.frees != 0 || on.frees < 10 {
		t.Errorf("frees: %d without release, %d with", off.frees, on.frees)
	}
	if on.peak >= off.peak {
		t.Errorf("peak %d elements with release, %d without", on.peak, off.peak)
	}
	t.Logf("peak %d elements with release (%d frees), %d without", on.peak, on.frees, off.peak)
}

// TestReleaseGradsShared: a gradient that EnsureGrad did not allocate (a
// tensor made to share another's gradient storage) is never given back,
// and a tensor recorded by two steps keeps its gradient until the earlier
// one has run.
func TestReleaseGradsShared(t *testing.T) {
	rng := testseed.New(t)
	b := backendtest.NewStepCPU(1)
	tp := tensor.NewTape(b)
	tp.ReleaseGrads()
	w := tensor.New[float32]("w", 3, 4)
	w.FillNormal(rng, 0, 1)
	w.RequiresGrad = true
	x := tensor.FromStorage("x", b.Upload([]float32{1, 2, 3, 4, 5, 6, 7, 8}, false), 2, 4)
	y := tp.Linear(x, w, nil) // [2, 3]
	// alias reads y's values and receives its gradient in y's own storage:
	// it holds y's gradient, which only y's step may give back.
	alias := &tensor.Tensor{Name: "alias", Shape: []int{2, 3}, Store: y.Store}
	tp.Record(alias, nil, func() {})
	// twice is recorded by two steps, each passing its gradient on to y.
	twice := tp.Scale(y, 2)
	tp.Record(twice, nil, func() { b.Axpy(1, twice.GradStore, y.EnsureGrad()) })
	loss := tp.Linear(tp.Reshape(twice, 1, 6), tensor.FromData("ones", []float32{1, 1, 1, 1, 1, 1}, 1, 6), nil)
	alias.GradStore = y.EnsureGrad()
	tp.Backward(tp.Reshape(loss, 1))
	// d loss/d y = 2 (Scale) + 1 (the second step of twice), so dw = 3·Σ_rows x.
	want := []float32{18, 24, 30, 36}
	for r := range 3 {
		if got := w.Grad()[4*r : 4*r+4]; !slices.Equal(got, want) {
			t.Fatalf("dw row %d = %v, want %v", r, got, want)
		}
	}
	if alias.GradStore == nil || y.GradStore != nil || twice.GradStore != nil {
		t.Errorf("after Backward: alias gradient %v (kept), y's %v and twice's %v (released)", alias.GradStore != nil, y.GradStore != nil, twice.GradStore != nil)
	}
}
