package tensor_test

import (
	"math"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// TestCPUAdamWMatchesPerTensor runs the CPU backend's AdamWStep over a
// parameter arena and replays it against a per-tensor reference of the
// update written out here (float64 arithmetic, float32 storage, one
// parameter at a time, as the update was computed before its state was
// flat). Values and moments must agree bit for bit after every step. The
// parameters total more than twice the elements a worker takes at least,
// in sizes that are not multiples of it, so that the workers' ranges
// straddle parameter boundaries; an empty parameter is among them.
func TestCPUAdamWMatchesPerTensor(t *testing.T) {
	rng := testseed.New(t)
	type decl struct {
		name  string
		shape []int
		decay bool
	}
	decls := []decl{{"embed.weight", []int{257, 300 + rng.IntN(50)}, true}, {"layers.0.input_layernorm.weight", []int{300}, false},
		{"layers.0.proj.weight", []int{211, 157 + rng.IntN(9)}, true}, {"layers.0.proj.bias", []int{211}, false},
		{"layers.1.proj.weight", []int{149, 263}, true}, {"norm.weight", []int{263}, false}, {"empty.weight", []int{0, 4}, true}}
	var arena tensor.Arena[float32]
	var decay []bool
	for _, d := range decls {
		arena.Param(d.name, d.shape...)
		decay = append(decay, d.decay)
	}
	arena.Alloc()
	arena.EnsureGrad()
	for i := range arena.HostValues() {
		arena.HostValues()[i] = float32(rng.NormFloat64())
	}
	if arena.Len() < 2<<16 { // two workers at least (the CPU's AdamW grain)
		t.Fatalf("%d parameter elements: too few to exercise the parallel pass", arena.Len())
	}
	h := tensor.AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	cpu := tensor.NewCPU[float32](4)
	st, err := cpu.NewAdamState(&arena, h, decay)
	if err != nil {
		t.Fatal(err)
	}
	ps := arena.Params()
	ref := make([]refAdamW, len(ps))
	for i, p := range ps {
		ref[i] = refAdamW{p: append([]float32(nil), p.Data()...), m: make([]float32, p.Numel()), v: make([]float32, p.Numel()), decay: decay[i]}
	}
	m, v := st.M.(tensor.Host[float32]), st.V.(tensor.Host[float32])
	for step := 1; step <= 6; step++ {
		lr := 1e-3 * (1 + rng.Float64())
		for i := range arena.HostGrad() {
			arena.HostGrad()[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
		}
		cpu.AdamWStep(&arena, st, lr)
		if st.Steps != int64(step) {
			t.Fatalf("step %d: the state counts %d steps", step, st.Steps)
		}
		for i, p := range ps {
			ref[i].step(h, lr, step, p.Grad())
			off := arena.Offset(i)
			for _, c := range []struct {
				what     string
				got, ref []float32
			}{{"value", p.Data(), ref[i].p}, {"exp_avg", m[off : off+p.Numel()], ref[i].m}, {"exp_avg_sq", v[off : off+p.Numel()], ref[i].v}} {
				for j := range c.ref {
					if math.Float32bits(c.got[j]) != math.Float32bits(c.ref[j]) {
						t.Fatalf("step %d %s %s[%d]: arena %v, per-tensor reference %v", step, p.Name, c.what, j, c.got[j], c.ref[j])
					}
				}
			}
		}
	}
	t.Run("frozen", func(t *testing.T) {
		var frozen tensor.Arena[float32]
		frozen.Param("w", 2)
		if _, err := cpu.NewAdamState(&frozen, h, []bool{true}); err == nil || !strings.Contains(err.Error(), "frozen") {
			t.Fatalf("an arena without values: err %v", err)
		}
	})
}

// refAdamW is one parameter's AdamW update on its own: its values and
// moments in their own float32 slices.
type refAdamW struct {
	p, m, v []float32
	decay   bool
}

func (r *refAdamW) step(h tensor.AdamW, lr float64, t int, grad []float32) {
	stepSize := lr / (1 - math.Pow(h.Beta1, float64(t)))
	bc2Sqrt := math.Sqrt(1 - math.Pow(h.Beta2, float64(t)))
	shrink := 1.0
	if r.decay {
		shrink = 1 - lr*h.WeightDecay
	}
	for j, g32 := range grad {
		g := float64(g32)
		r.m[j] = float32(h.Beta1*float64(r.m[j]) + (1-h.Beta1)*g)
		r.v[j] = float32(h.Beta2*float64(r.v[j]) + (1-h.Beta2)*g*g)
		w := float64(r.p[j]) * shrink
		w -= stepSize * float64(r.m[j]) / (math.Sqrt(float64(r.v[j]))/bc2Sqrt + h.Eps)
		r.p[j] = float32(w)
	}
}

// TestCPUSumSquares: the sum of squares, in float64, of values whose
// squares a float32 sum would round.
func TestCPUSumSquares(t *testing.T) {
	rng := testseed.New(t)
	x := make([]float32, 1000+rng.IntN(1000))
	var want float64
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 1e3)
		want += float64(x[i]) * float64(x[i])
	}
	if got := tensor.NewCPU[float32](2).SumSquares(tensor.Host[float32](x)); got != want {
		t.Fatalf("SumSquares %v, float64 sum in order %v", got, want)
	}
}
