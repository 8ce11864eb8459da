package tensor_test

import (
	"math"
	"slices"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestMLPRecomputeSavesStorage runs a stack of residual MLP blocks
// (z += MLP(RMSNorm(z)), a scope a block, gradients and dead activations
// released) on step memory, once with Linear, SwiGLU, Linear and once with
// MLP on Span(gate, up), and checks that they give the same loss and
// parameter gradients, that at the end of the forward pass MLP holds
// exactly rows·I elements a block less (act, which its backward step
// recomputes; gate and up are one product y2 either way), and that the
// step's peak is lower by at least as much.
func TestMLPRecomputeSavesStorage(t *testing.T) {
	const layers, rows, hidden, inter = 3, 10, 8, 24
	rng := testseed.New(t)
	var a tensor.Arena[float32]
	type block struct{ norm, gate, up, down *tensor.Tensor }
	var bs []block
	for range layers {
		bs = append(bs, block{a.Param("norm", hidden), a.Param("gate", inter, hidden), a.Param("up", inter, hidden), a.Param("down", hidden, inter)})
	}
	a.Alloc()
	for i := range a.HostValues() {
		a.HostValues()[i] = float32(rng.NormFloat64() * 0.5)
	}
	x := tensor.New[float32]("x", rows, hidden)
	x.FillNormal(rng, 0, 1)
	seed := rng.Uint64()

	run := func(packed bool) (loss float32, grads []float32, atEnd, peak int) {
		b := backendtest.NewStepCPU(1)
		a.ZeroGrad()
		tp := tensor.NewTape(b)
		tp.ReleaseGrads()
		z := tensor.FromStorage("z", b.Upload(x.Data(), false), rows, hidden)
		for _, l := range bs {
			m := tp.BeginScope()
			n := tp.RMSNorm(z, l.norm, 1e-6)
			var mlp *tensor.Tensor
			if packed {
				mlp = tp.MLP(n, tensor.Span(l.gate, l.up), l.down, nil, nil)
			} else {
				mlp = tp.Linear(tp.SwiGLU(tp.Linear(n, l.gate, nil), tp.Linear(n, l.up, nil)), l.down, nil)
			}
			z = tp.Add(z, mlp)
			tp.EndScope(m, z)
		}
		out := weightedSum(tp, z, seed)
		tp.EndScope(0, out)
		atEnd = b.InUse()
		tp.Backward(out)
		return out.Data()[0], slices.Clone(a.HostGrad()), atEnd, b.Peak
	}
	l0, g0, end0, peak0 := run(false)
	l1, g1, end1, peak1 := run(true)
	t.Logf("unfused: %d elements at the end of the forward pass, peak %d; MLP: %d, peak %d (rows·I·layers = %d)",
		end0, peak0, end1, peak1, rows*inter*layers)
	if math.Abs(float64(l0-l1)) > 1e-5*math.Abs(float64(l0)) {
		t.Fatalf("loss %g with MLP, %g unfused", l1, l0)
	}
	var scale float64
	for _, g := range g0 {
		scale = max(scale, math.Abs(float64(g)))
	}
	for i := range g0 {
		if math.Abs(float64(g0[i]-g1[i])) > 1e-5*scale {
			t.Fatalf("flat gradient [%d] = %g with MLP, %g unfused", i, g1[i], g0[i])
		}
	}
	if end0-end1 != rows*inter*layers || peak0-peak1 < rows*inter*layers {
		t.Errorf("MLP holds %d fewer elements at the end of the forward pass (want %d) and peaks %d lower (want at least that)",
			end0-end1, rows*inter*layers, peak0-peak1)
	}
}
