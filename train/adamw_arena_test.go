package train

import (
	"math"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// TestAdamWArenaMatchesPerTensor runs AdamW on the same parameters laid
// out two ways, as views of one tensor.Arena and as separately allocated
// slices, and replays both against a per-tensor reference of the update
// written out here (float64 arithmetic, float32 storage, one parameter at a
// time, as AdamW computed it before its state was flat). Values and moments
// must agree bit for bit after every step. The parameters total more than
// parallelMin elements with sizes that are not multiples of it, so the
// chunks of the flat pass straddle parameter boundaries and run on several
// goroutines.
func TestAdamWArenaMatchesPerTensor(t *testing.T) {
	rng := testseed.New(t)
	type decl struct {
		name  string
		shape []int
	}
	decls := []decl{{"embed.weight", []int{257, 300 + rng.IntN(50)}}, {"layers.0.input_layernorm.weight", []int{300}},
		{"layers.0.proj.weight", []int{211, 157 + rng.IntN(9)}}, {"layers.0.proj.bias", []int{211}},
		{"layers.1.proj.weight", []int{149, 263}}, {"norm.weight", []int{263}}, {"empty.weight", []int{0, 4}}}
	var arena tensor.Arena[float32]
	for _, d := range decls {
		arena.Param(d.name, d.shape...)
	}
	arena.Alloc()
	arena.EnsureGrad()
	var flat, sep []*Param
	for _, p := range arena.Params() {
		flat = append(flat, &Param{Name: p.Name, Shape: p.Shape, Data: p.Data(), Grad: p.Grad()})
		q := NewParam(p.Name, p.Shape...)
		for j := range p.Data() {
			p.Data()[j] = float32(rng.NormFloat64())
		}
		copy(q.Data, p.Data())
		sep = append(sep, q)
	}
	if arena.Len() < 2*parallelMin {
		t.Fatalf("%d parameter elements: too few to exercise the parallel pass", arena.Len())
	}
	cfg := AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	optFlat, optSep := NewAdamW(flat, cfg), NewAdamW(sep, cfg)
	ref := newRefAdamW(sep, cfg)
	for step := 1; step <= 6; step++ {
		lr := 1e-3 * (1 + rng.Float64())
		for i, p := range flat {
			for j := range p.Grad {
				p.Grad[j] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
			}
			copy(sep[i].Grad, p.Grad)
		}
		optFlat.Step(lr)
		optSep.Step(lr)
		ref.step(lr)
		for i := range flat {
			for _, c := range []struct {
				what      string
				a, b, ref []float32
			}{{"value", flat[i].Data, sep[i].Data, ref.p[i]}, {"exp_avg", optFlat.m[i], optSep.m[i], ref.m[i]}, {"exp_avg_sq", optFlat.v[i], optSep.v[i], ref.v[i]}} {
				for j := range c.ref {
					if math.Float32bits(c.a[j]) != math.Float32bits(c.ref[j]) || math.Float32bits(c.b[j]) != math.Float32bits(c.ref[j]) {
						t.Fatalf("step %d %s %s[%d]: arena %v, separate %v, per-tensor reference %v", step, flat[i].Name, c.what, j, c.a[j], c.b[j], c.ref[j])
					}
				}
			}
		}
	}
	// The arena's flat buffer is what the optimizer wrote.
	for i, p := range arena.Params() {
		if len(p.Data()) > 0 && math.Float32bits(arena.HostValues()[arena.Offset(i)]) != math.Float32bits(ref.p[i][0]) {
			t.Fatalf("%s: flat buffer holds %v, reference %v", p.Name, arena.HostValues()[arena.Offset(i)], ref.p[i][0])
		}
	}
}

// refAdamW is the per-tensor AdamW update: each parameter on its own, its
// moments in their own float32 slices.
type refAdamW struct {
	cfg     AdamWConfig
	grads   [][]float32
	p, m, v [][]float32
	decay   []bool
	t       int
}

func newRefAdamW(params []*Param, cfg AdamWConfig) *refAdamW {
	r := &refAdamW{cfg: cfg}
	for _, p := range params {
		r.grads = append(r.grads, p.Grad)
		r.p = append(r.p, append([]float32(nil), p.Data...))
		r.m = append(r.m, make([]float32, len(p.Data)))
		r.v = append(r.v, make([]float32, len(p.Data)))
		r.decay = append(r.decay, cfg.WeightDecay != 0 && !DefaultNoDecay(p))
	}
	return r
}

func (r *refAdamW) step(lr float64) {
	r.t++
	b1, b2 := r.cfg.Beta1, r.cfg.Beta2
	stepSize := lr / (1 - math.Pow(b1, float64(r.t)))
	bc2Sqrt := math.Sqrt(1 - math.Pow(b2, float64(r.t)))
	for i := range r.p {
		shrink := 1.0
		if r.decay[i] {
			shrink = 1 - lr*r.cfg.WeightDecay
		}
		for j, g32 := range r.grads[i] {
			g := float64(g32)
			r.m[i][j] = float32(b1*float64(r.m[i][j]) + (1-b1)*g)
			r.v[i][j] = float32(b2*float64(r.v[i][j]) + (1-b2)*g*g)
			w := float64(r.p[i][j]) * shrink
			w -= stepSize * float64(r.m[i][j]) / (math.Sqrt(float64(r.v[i][j]))/bc2Sqrt + r.cfg.Eps)
			r.p[i][j] = float32(w)
		}
	}
}
