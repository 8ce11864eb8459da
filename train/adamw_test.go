package train

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/safetensors"
	"dflash/tensor"
)

func close32(a, b float32, tol float64) bool {
	return math.Abs(float64(a)-float64(b)) <= tol*(1+math.Abs(float64(b)))
}

// testArena returns an arena in host memory with parameters of the given
// names and shapes (name, shape, name, shape...), allocated with its
// gradient.
func testArena(decls ...any) *tensor.Arena[float32] {
	a := &tensor.Arena[float32]{}
	for i := 0; i < len(decls); i += 2 {
		a.Param(decls[i].(string), decls[i+1].([]int)...)
	}
	a.Alloc()
	a.EnsureGrad()
	return a
}

// mustParams returns NewParams of a on the CPU with h.
func mustParams(t *testing.T, a *tensor.Arena[float32], h tensor.AdamW) *Params {
	t.Helper()
	p, err := NewParams(testCPU, a, h)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// moments returns parameter i's range of the host moments of p.
func moments(p *Params, i int) (m, v []float32) {
	off, n := p.a.Offset(i), p.a.Params()[i].Numel()
	return tensor.HostData(p.state.M, "m")[off : off+n], tensor.HostData(p.state.V, "v")[off : off+n]
}

// TestAdamWMatchesTorch replays a trajectory of torch.optim.AdamW (two parameter
// groups: decay 0.1 on a matrix, none on a norm vector) with clip_grad_norm_(1.0)
// before every step and a changing learning rate, recorded on the GPU machine by
// scripts/safetensors_golden.py into testdata/adamw_golden.safetensors, through
// Params on the CPU backend.
func TestAdamWMatchesTorch(t *testing.T) {
	f, err := safetensors.Open("testdata/adamw_golden.safetensors")
	if err != nil {
		t.Skipf("golden file missing (%v): regenerate with scripts/safetensors_golden.py on the GPU machine", err)
	}
	defer f.Close()
	get := func(name string) []float32 {
		v, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	meta := f.Metadata()
	steps, _ := strconv.Atoi(meta["steps"])
	a := testArena("layer.weight", []int{6, 5}, "layer.norm.weight", []int{5})
	w, n := a.Params()[0], a.Params()[1]
	copy(w.Data(), get("w0"))
	copy(n.Data(), get("n0"))
	p := mustParams(t, a, tensor.AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if !p.Decays(0) || p.Decays(1) {
		t.Fatal("decay rule: the matrix decays, the norm does not")
	}
	lrs, norms := get("lrs"), get("norms")
	for s := range steps {
		copy(w.Grad(), get(fmt.Sprintf("gw.%d", s)))
		copy(n.Grad(), get(fmt.Sprintf("gn.%d", s)))
		norm := p.ClipGradNorm(1.0)
		if !close32(float32(norm), norms[s], 1e-6) {
			t.Fatalf("step %d: grad norm %g, torch %g", s, norm, norms[s])
		}
		p.Step(float64(lrs[s]))
		for _, c := range []struct {
			p    *tensor.Tensor
			want string
		}{{w, fmt.Sprintf("w.%d", s)}, {n, fmt.Sprintf("n.%d", s)}} {
			want := get(c.want)
			for i := range want {
				if !close32(c.p.Data()[i], want[i], 2e-6) {
					t.Fatalf("step %d %s[%d] = %.9g, torch %.9g", s, c.p.Name, i, c.p.Data()[i], want[i])
				}
			}
		}
	}
	for i, name := range []string{"w", "n"} {
		m, v := moments(p, i)
		for _, mv := range []struct {
			got  []float32
			want string
		}{{m, name + ".exp_avg"}, {v, name + ".exp_avg_sq"}} {
			want := get(mv.want)
			for j := range want {
				if !close32(mv.got[j], want[j], 1e-5) {
					t.Fatalf("%s[%d] = %g, torch %g", mv.want, j, mv.got[j], want[j])
				}
			}
		}
	}
	t.Logf("%d steps match torch %s", steps, meta["torch"])
}

// TestAdamWReference checks many random steps against the textbook bias-corrected
// form, computed entirely in float64: m^ = m/(1-b1^t), v^ = v/(1-b2^t),
// p <- p(1 - lr wd) - lr m^/(sqrt(v^)+eps).
func TestAdamWReference(t *testing.T) {
	seed := testseed.Seed(t)
	r := NewRNG(seed, 0)
	a := testArena("proj.weight", []int{3, 7}, "proj.bias", []int{7})
	ps := a.Params()
	for i := range a.HostValues() {
		a.HostValues()[i] = float32(r.NormFloat64())
	}
	cfg := tensor.AdamW{Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.05}
	opt := mustParams(t, a, cfg)
	type ref struct{ p, m, v []float64 }
	refs := []ref{}
	for _, x := range ps {
		rr := ref{make([]float64, x.Numel()), make([]float64, x.Numel()), make([]float64, x.Numel())}
		for i, v := range x.Data() {
			rr.p[i] = float64(v)
		}
		refs = append(refs, rr)
	}
	for step := 1; step <= 25; step++ {
		lr := 0.01 * (1 + r.Float64())
		for k, x := range ps {
			decay := k == 0
			for i := range x.Grad() {
				g := r.NormFloat64() * math.Exp(r.NormFloat64())
				x.Grad()[i] = float32(g)
				g = float64(x.Grad()[i])
				rr := refs[k]
				rr.m[i] = cfg.Beta1*rr.m[i] + (1-cfg.Beta1)*g
				rr.v[i] = cfg.Beta2*rr.v[i] + (1-cfg.Beta2)*g*g
				mh := rr.m[i] / (1 - math.Pow(cfg.Beta1, float64(step)))
				vh := rr.v[i] / (1 - math.Pow(cfg.Beta2, float64(step)))
				if decay {
					rr.p[i] *= 1 - lr*cfg.WeightDecay
				}
				rr.p[i] -= lr * mh / (math.Sqrt(vh) + cfg.Eps)
			}
		}
		opt.Step(lr)
		for k, x := range ps {
			for i, v := range x.Data() {
				if math.Abs(float64(v)-refs[k].p[i]) > 1e-5*(1+math.Abs(refs[k].p[i])) {
					t.Fatalf("step %d %s[%d] = %g, reference %g", step, x.Name, i, v, refs[k].p[i])
				}
			}
		}
	}
	if opt.Steps() != 25 {
		t.Errorf("step count %d", opt.Steps())
	}
}

func TestNoDecay(t *testing.T) {
	cases := []struct {
		name  string
		shape []int
		want  bool
	}{
		{"layers.0.mlp.up_proj.weight", []int{4, 4}, false},
		{"fc.weight", []int{4, 8}, false},
		{"layers.0.input_layernorm.weight", []int{4}, true},
		{"hidden_norm.weight", []int{4, 1}, true},
		{"q_proj.bias", []int{4}, true},
		{"conv.bias", []int{4, 1}, true},
		{"scale", []int{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NoDecay(c.name, c.shape); got != c.want {
				t.Fatalf("NoDecay = %v, want %v", got, c.want)
			}
		})
	}
}

// saveParams writes p's values and optimizer files into dir, as a checkpoint holds them.
func saveParams(t *testing.T, p *Params, dir string) {
	t.Helper()
	s := p.hostSnapshot()
	values, err := s.saveValues(filepath.Join(dir, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	moments, err := s.saveOptimizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The sums computed while writing are the files'.
	for name, sum := range map[string]FileSum{ModelFile: values, OptimizerTensorsFile: moments} {
		if got, err := fileSum(filepath.Join(dir, name)); err != nil || got != sum {
			t.Fatalf("%s: written with sum %+v, reads back %+v (%v)", name, sum, got, err)
		}
	}
}

func TestAdamWSaveLoad(t *testing.T) {
	mk := func(decls ...any) *tensor.Arena[float32] {
		if decls == nil {
			decls = []any{"a.weight", []int{2, 3}, "b.norm", []int{3}}
		}
		a := testArena(decls...)
		for i := range a.HostValues() {
			a.HostValues()[i] = float32(i) - 2.5
		}
		return a
	}
	cfg := tensor.AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	a := mk()
	opt := mustParams(t, a, cfg)
	for s := range 3 {
		for i := range a.HostGrad() {
			a.HostGrad()[i] = float32(math.Sin(float64(s*7 + i)))
		}
		opt.Step(0.01)
	}
	dir := t.TempDir()
	saveParams(t, opt, dir)
	a2 := testArena("a.weight", []int{2, 3}, "b.norm", []int{3})
	opt2 := mustParams(t, a2, cfg)
	if err := opt2.Load(dir); err != nil {
		t.Fatal(err)
	}
	assertSameBits(t, "values", snapshot(a.Params()), snapshot(a2.Params()))
	for i := range a.Params() {
		m, v := moments(opt, i)
		m2, v2 := moments(opt2, i)
		assertSameBits(t, "exp_avg", [][]float32{m}, [][]float32{m2})
		assertSameBits(t, "exp_avg_sq", [][]float32{v}, [][]float32{v2})
	}
	if opt.Steps() != opt2.Steps() {
		t.Fatalf("steps %d vs %d", opt.Steps(), opt2.Steps())
	}
	// Same next step from both.
	for k, x := range []*tensor.Arena[float32]{a, a2} {
		for i := range x.HostGrad() {
			x.HostGrad()[i] = 0.5 - float32(i)
		}
		[]*Params{opt, opt2}[k].Step(0.02)
	}
	assertSameBits(t, "after load", snapshot(a.Params()), snapshot(a2.Params()))

	// withOptimizerOf returns a checkpoint directory holding other's values
	// and the optimizer files of dir, so that other's Load reaches them.
	withOptimizerOf := func(t *testing.T, other *Params) string {
		d := t.TempDir()
		if _, err := other.hostSnapshot().saveValues(filepath.Join(d, ModelFile)); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{OptimizerTensorsFile, OptimizerStateFile} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(d, f), b, 0o644)
		}
		return d
	}
	t.Run("hyper-parameter-mismatch", func(t *testing.T) {
		c := cfg
		c.Beta2 = 0.999
		err := mustParams(t, mk(), c).Load(dir)
		if err == nil || !strings.Contains(err.Error(), "beta2") || !strings.Contains(err.Error(), OptimizerStateFile) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("shape-mismatch", func(t *testing.T) {
		other := mustParams(t, mk("a.weight", []int{3, 2}, "b.norm", []int{3}), cfg)
		if err := other.Load(dir); err == nil || !strings.Contains(err.Error(), `"a.weight"`) || !strings.Contains(err.Error(), ModelFile) {
			t.Fatalf("values: err %v", err)
		}
		if err := other.Load(withOptimizerOf(t, other)); err == nil || !strings.Contains(err.Error(), `"a.weight.exp_avg"`) {
			t.Fatalf("moments: err %v", err)
		}
	})
	t.Run("missing-param", func(t *testing.T) {
		other := mustParams(t, mk("a.weight", []int{2, 3}, "b.norm", []int{3}, "c.weight", []int{2}), cfg)
		if err := other.Load(withOptimizerOf(t, other)); err == nil || !strings.Contains(err.Error(), `"c.weight"`) || !strings.Contains(err.Error(), OptimizerStateFile) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("step-counts-differ", func(t *testing.T) {
		d := withOptimizerOf(t, opt)
		p := filepath.Join(d, OptimizerStateFile)
		raw, _ := os.ReadFile(p)
		os.WriteFile(p, []byte(strings.Replace(string(raw), `"b.norm": 3`, `"b.norm": 2`, 1)), 0o644)
		if err := mustParams(t, mk(), cfg).Load(d); err == nil || !strings.Contains(err.Error(), `"b.norm"`) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("file-layout", func(t *testing.T) {
		f, err := safetensors.Open(filepath.Join(dir, OptimizerTensorsFile))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		want := "[a.weight.exp_avg a.weight.exp_avg_sq b.norm.exp_avg b.norm.exp_avg_sq]"
		if got := fmt.Sprint(f.Names()); got != want {
			t.Fatalf("names %s, want %s", got, want)
		}
		raw, _ := os.ReadFile(filepath.Join(dir, OptimizerStateFile))
		if !strings.Contains(string(raw), `"a.weight": 3`) {
			t.Fatalf("optimizer.json: %s", raw)
		}
	})
}
