package tensor_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestRecompute: an RMSNorm output marked by Recompute and read by three
// Linears (one through a Reshape view) is given back when its scope ends,
// though backward steps read it, which frees exactly its elements; it
// stays given back until the first of those steps, is recomputed for it,
// lives until the last and is given back for good after it, and the gradients of every input are the plain CPU backend's
// bit for bit (step memory poisons what it frees with NaN and hands out
// new outputs NaN-filled, so a read of the given-back storage would show).
// With KeepRecomputable, without ReleaseGrads or on the plain CPU backend
// nothing is given back early.
func TestRecompute(t *testing.T) {
	rng := testseed.New(t)
	const rows, dim = 5, 8
	leaf := func(name string, mean float64, shape ...int) *tensor.Tensor {
		x := tensor.New[float32](name, shape...)
		x.FillNormal(rng, mean, 0.5)
		x.RequiresGrad = true
		return x
	}
	leaves := []*tensor.Tensor{leaf("x", 0.1, rows, dim), leaf("norm", 1, dim), leaf("w1", 0, 3, dim), leaf("w2", 0, 8, dim/2), leaf("w3", 0, 2, dim)}
	seed := rng.Uint64()
	run := func(t *testing.T, b tensor.Backend[float32], release, keep, want bool) [][]float32 {
		tp := tensor.NewTape(b)
		if release {
			tp.ReleaseGrads()
		}
		if keep {
			tp.KeepRecomputable()
		}
		step, _ := b.(*backendtest.StepCPU)
		x := tp.Scale(leaves[0], 1) // an op output, as a layer's input is
		m := tp.BeginScope()
		n := tp.Recompute(tp.RMSNorm(x, leaves[1], 1e-6))
		a := tp.Linear(n, leaves[2], nil)
		c := tp.Linear(tp.Reshape(n, 2*rows, dim/2), leaves[3], nil)
		// mid's step runs after the last reader of n but the first (a).
		var restored bool
		mid := tp.Reshape(a, 3*rows)
		tp.Record(mid, nil, func() {
			tp.Backend().Axpy(1, mid.GradStore, a.EnsureGrad())
			restored = !tensor.Evicted(n) && !tensor.Released(n) && n.Store != nil
		})
		d := tp.Linear(n, leaves[4], nil)
		var before int
		if step != nil {
			before = step.InUse()
		}
		tp.EndScope(m, mid, c, d)
		if tensor.Evicted(n) != want {
			t.Fatalf("after EndScope: given back to be recomputed %v, want %v", tensor.Evicted(n), want)
		}
		if step != nil && want && before-step.InUse() != rows*dim {
			t.Errorf("EndScope freed %d elements, want the normed output's %d", before-step.InUse(), rows*dim)
		}
		// first's step runs before every reader of n.
		var evicted bool
		first := tp.Reshape(d, 2*rows)
		tp.Record(first, nil, func() {
			tp.Backend().Axpy(1, first.GradStore, d.EnsureGrad())
			evicted = tensor.Evicted(n)
		})
		tp.Backward(weightedSum(tp, tp.Concat(0, mid, tp.Reshape(c, 16*rows), first), seed))
		if want && (!evicted || !restored || !tensor.Released(n)) {
			t.Errorf("given back before its readers %v, recomputed for them %v, given back after Backward %v; want all true",
				evicted, restored, tensor.Released(n))
		}
		var grads [][]float32
		for _, l := range leaves {
			grads = append(grads, slices.Clone(l.Grad()))
			l.DropGrad()
		}
		b.ResetStep()
		return grads
	}
	ref := run(t, tensor.NewCPU[float32](1), true, false, false)
	for _, c := range []struct {
		name                string
		b                   tensor.Backend[float32]
		release, keep, want bool
	}{
		{"step memory", backendtest.NewStepCPU(1), true, false, true},
		{"KeepRecomputable", backendtest.NewStepCPU(1), true, true, false},
		{"no release", backendtest.NewStepCPU(1), false, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := run(t, c.b, c.release, c.keep, c.want)
			for i := range ref {
				for j := range ref[i] {
					if math.IsNaN(float64(got[i][j])) || math.Float32bits(got[i][j]) != math.Float32bits(ref[i][j]) {
						t.Fatalf("%s.grad[%d] = %g, %g on the CPU", leaves[i].Name, j, got[i][j], ref[i][j])
					}
				}
			}
		})
	}
}

// TestRecomputeOther: Recompute of an output its op cannot recompute is a
// programmer error that names the tensor.
func TestRecomputeOther(t *testing.T) {
	tp := tensor.NewTape[float32](backendtest.NewStepCPU(1))
	tp.ReleaseGrads()
	x := tensor.New[float32]("x", 2, 3)
	x.RequiresGrad = true
	y := tp.Scale(x, 2)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "x*") {
			t.Fatalf("Recompute of a Scale output: recovered %v, want a panic naming x*", r)
		}
	}()
	tp.Recompute(y)
}
