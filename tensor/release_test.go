package tensor_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/flex"
	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// saveCase is an op applied to inputs that only it reads, with the inputs
// its backward step reads (saves): the others are dead once the forward
// pass is done.
type saveCase struct {
	name   string
	shapes [][]int
	saves  []bool
	op     func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor
}

func saveCases(t *testing.T) []saveCase {
	d := flex.Dims{Batch: 1, HeadsQ: 2, HeadsKV: 1, LenQ: 4, LenKV: 4, HeadDim: 4}
	rope, err := tensor.NewRope(4, 10000, nil)
	if err != nil {
		t.Fatal(err)
	}
	return []saveCase{
		{"Linear", [][]int{{3, 4}, {5, 4}}, []bool{true, true},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor { return tp.Linear(in[0], in[1], nil) }},
		{"LinearBias", [][]int{{3, 4}, {5, 4}, {5}}, []bool{true, true, false},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor { return tp.Linear(in[0], in[1], in[2]) }},
		{"RMSNorm", [][]int{{3, 4}, {4}}, []bool{true, true},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor { return tp.RMSNorm(in[0], in[1], 1e-6) }},
		{"SwiGLU", [][]int{{3, 4}, {3, 4}}, []bool{true, true},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor { return tp.SwiGLU(in[0], in[1]) }},
		{"Attention", [][]int{{1, 2, 4, 4}, {1, 1, 4, 4}, {1, 1, 4, 4}}, []bool{true, true, true},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor {
				m, err := tp.Backend().NewMask(flex.Causal(), flex.NewArgs(), d)
				if err != nil {
					t.Fatal(err)
				}
				return tp.Attention(in[0], in[1], in[2], m, nil, 0.5)
			}},
		{"Add", [][]int{{3, 4}, {3, 4}}, []bool{false, false},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor { return tp.Add(in[0], in[1]) }},
		{"Scale", [][]int{{3, 4}}, []bool{false},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor { return tp.Scale(in[0], -1.5) }},
		{"Reshape", [][]int{{3, 4}}, []bool{false},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor { return tp.Reshape(in[0], 2, 6) }},
		{"Concat", [][]int{{3, 4}, {3, 2}}, []bool{false, false},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor { return tp.Concat(1, in[0], in[1]) }},
		{"Slice", [][]int{{3, 4}}, []bool{false},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor { return tp.Slice(in[0], 1, 1, 3) }},
		{"Transpose12", [][]int{{2, 3, 2, 2}}, []bool{false},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor { return tp.Transpose12(in[0]) }},
		{"RoPE", [][]int{{3, 2, 4}}, []bool{false},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor {
				return tp.RoPE(in[0], tensor.Table(tp.Backend(), rope, []int32{0, 5, 2}))
			}},
		{"NormRoPEHeads", [][]int{{1, 3, 2, 4}, {4}}, []bool{true, true},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor {
				return tp.NormRoPEHeads(in[0], in[1], 1e-6, tensor.Table(tp.Backend(), rope, []int32{0, 5, 2}))
			}},
		{"NormRoPEHeadsNoWeight", [][]int{{1, 3, 2, 4}}, []bool{false},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor {
				return tp.NormRoPEHeads(in[0], nil, 1e-6, tensor.Table(tp.Backend(), rope, []int32{0, 5, 2}))
			}},
		{"NormRoPE", [][]int{{3, 8}, {4}}, []bool{true, true},
			func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor {
				return tp.NormRoPE(in[0], in[1], 1e-6, tensor.Table(tp.Backend(), rope, []int32{0, 5, 2}))
			}},
	}
}

// TestReleaseSaves: each op's backward step declares exactly the inputs
// whose values it reads. Every input is an op output that only the op
// under test reads, so with ReleaseGrads on step memory (which poisons
// what it frees with NaN and reuses it) the inputs it does not save are
// given back before its step runs and those it saves are not; and the
// gradients are the plain CPU backend's bit for bit, which they would not
// be if the step read an input it did not save.
func TestReleaseSaves(t *testing.T) {
	rng := testseed.New(t)
	for _, c := range saveCases(t) {
		t.Run(c.name, func(t *testing.T) {
			leaves := make([]*tensor.Tensor, len(c.shapes))
			for i, sh := range c.shapes {
				leaves[i] = tensor.New[float32]("leaf", sh...)
				leaves[i].FillNormal(rng, 0.2, 1)
				leaves[i].RequiresGrad = true
			}
			run := func(b tensor.Backend[float32]) (grads [][]float32, released []bool) {
				tp := tensor.NewTape(b)
				tp.ReleaseGrads()
				in := make([]*tensor.Tensor, len(leaves))
				for i, l := range leaves {
					in[i] = tp.Scale(l, 1) // an op output; Scale's step reads no values
				}
				y := tp.Scale(c.op(tp, in), 1)
				released = make([]bool, len(in))
				probe := tp.Reshape(y, y.Numel()) // its step runs just before the op's
				tp.Record(probe, nil, func() {
					b.Axpy(1, probe.GradStore, y.EnsureGrad())
					for i, x := range in {
						released[i] = tensor.Released(x)
					}
				})
				loss := weightedSum(tp, probe, rng.Uint64())
				tp.Backward(loss)
				for _, l := range leaves {
					grads = append(grads, slices.Clone(l.Grad()))
					l.DropGrad()
				}
				b.ResetStep()
				return grads, released
			}
			seed := rng.Uint64()
			rng = rand.New(rand.NewPCG(seed, 0))
			want, _ := run(tensor.NewCPU[float32](1))
			rng = rand.New(rand.NewPCG(seed, 0))
			got, released := run(backendtest.NewStepCPU(1))
			for i := range c.saves {
				if released[i] == c.saves[i] {
					t.Errorf("input %d given back before the op's step: %v, want %v (saved: %v)", i, released[i], !c.saves[i], c.saves[i])
				}
				for j := range want[i] {
					if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
						t.Fatalf("input %d gradient [%d] = %g on step memory with release, %g on the CPU", i, j, got[i][j], want[i][j])
					}
				}
			}
		})
	}
}

// weightedSum returns Σ_i r_i·x_i for x [n] and random weights r drawn
// from seed, as a tensor of one element.
func weightedSum(tp *tensor.Tape, x *tensor.Tensor, seed uint64) *tensor.Tensor {
	r := tensor.New[float32]("r", 1, x.Numel())
	r.FillNormal(rand.New(rand.NewPCG(seed, 1)), 0, 1)
	return tp.Reshape(tp.Linear(tp.Reshape(x, 1, x.Numel()), r, nil), 1)
}

// TestReleaseScope: EndScope gives back at once the op outputs made in the
// scope that no backward step reads, but the live ones; one that a step
// reads (through a Reshape view) waits for that step, and one passed to
// KeepValue survives Backward with its values. Without ReleaseGrads, or on
// the plain CPU backend, nothing is given back.
func TestReleaseScope(t *testing.T) {
	rng := testseed.New(t)
	w := tensor.New[float32]("w", 3)
	w.FillNormal(rng, 1, 0.2)
	w.RequiresGrad = true
	leaf := tensor.New[float32]("leaf", 3, 4)
	leaf.FillNormal(rng, 0, 1)
	leaf.RequiresGrad = true
	for _, c := range []struct {
		name    string
		b       tensor.Backend[float32]
		release bool
	}{{"step memory", backendtest.NewStepCPU(1), true}, {"no release", backendtest.NewStepCPU(1), false}, {"CPU", tensor.NewCPU[float32](1), true}} {
		t.Run(c.name, func(t *testing.T) {
			tp := tensor.NewTape(c.b)
			if c.release {
				tp.ReleaseGrads()
			}
			on := c.release && c.name == "step memory"
			x := tp.Scale(leaf, 2)
			m := tp.BeginScope()
			dead := tp.Scale(x, 3)       // read by no step
			saved := tp.Scale(dead, 0.5) // read by RMSNorm through a view
			y := tp.RMSNorm(tp.Reshape(saved, 4, 3), tensor.New[float32]("ones", 3), 1e-6)
			kept := tp.Scale(y, -1)
			tp.EndScope(m, kept)
			if tensor.Released(dead) != on || tensor.Released(saved) || tensor.Released(kept) || tensor.Released(x) {
				t.Fatalf("after EndScope: released dead %v (want %v), saved %v, kept %v, before the scope %v (want false)",
					tensor.Released(dead), on, tensor.Released(saved), tensor.Released(kept), tensor.Released(x))
			}
			want := slices.Clone(tensor.HostData(kept.Store, "kept"))
			tp.KeepValue(kept)
			loss := weightedSum(tp, tp.RMSNorm(kept, w, 1e-6), rng.Uint64())
			tp.Backward(loss)
			if tensor.Released(saved) != on || tensor.Released(x) != on || tensor.Released(kept) {
				t.Errorf("after Backward: released saved %v, before the scope %v (want %v), kept %v (want false)",
					tensor.Released(saved), tensor.Released(x), on, tensor.Released(kept))
			}
			if got := tensor.HostData(kept.Store, "kept"); !slices.Equal(got, want) {
				t.Errorf("kept values %v after Backward, %v before", got, want)
			}
			leaf.DropGrad()
			w.DropGrad()
		})
	}
}
