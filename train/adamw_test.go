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
)

func close32(a, b float32, tol float64) bool {
	return math.Abs(float64(a)-float64(b)) <= tol*(1+math.Abs(float64(b)))
}

// TestAdamWMatchesTorch replays a trajectory of torch.optim.AdamW (two parameter
// groups: decay 0.1 on a matrix, none on a norm vector) with clip_grad_norm_(1.0)
// before every step and a changing learning rate, recorded on the GPU machine by
// scripts/safetensors_golden.py into testdata/adamw_golden.safetensors.
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
	w := &Param{Name: "layer.weight", Shape: []int{6, 5}, Data: get("w0"), Grad: make([]float32, 30)}
	n := &Param{Name: "layer.norm.weight", Shape: []int{5}, Data: get("n0"), Grad: make([]float32, 5)}
	params := []*Param{w, n}
	opt := NewAdamW(params, AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if !opt.Decays(w.Name) || opt.Decays(n.Name) {
		t.Fatal("decay rule: the matrix decays, the norm does not")
	}
	lrs, norms := get("lrs"), get("norms")
	for s := range steps {
		copy(w.Grad, get(fmt.Sprintf("gw.%d", s)))
		copy(n.Grad, get(fmt.Sprintf("gn.%d", s)))
		norm := ClipGradNorm(params, 1.0)
		if !close32(float32(norm), norms[s], 1e-6) {
			t.Fatalf("step %d: grad norm %g, torch %g", s, norm, norms[s])
		}
		opt.Step(float64(lrs[s]))
		for _, c := range []struct {
			p    *Param
			want string
		}{{w, fmt.Sprintf("w.%d", s)}, {n, fmt.Sprintf("n.%d", s)}} {
			want := get(c.want)
			for i := range want {
				if !close32(c.p.Data[i], want[i], 2e-6) {
					t.Fatalf("step %d %s[%d] = %.9g, torch %.9g", s, c.p.Name, i, c.p.Data[i], want[i])
				}
			}
		}
	}
	for i, name := range []string{"w", "n"} {
		for _, mv := range []struct {
			got  []float32
			want string
		}{{opt.m[i], name + ".exp_avg"}, {opt.v[i], name + ".exp_avg_sq"}} {
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
	p := NewParam("proj.weight", 3, 7)
	q := NewParam("proj.bias", 7)
	for _, x := range []*Param{p, q} {
		for i := range x.Data {
			x.Data[i] = float32(r.NormFloat64())
		}
	}
	cfg := AdamWConfig{Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.05}
	opt := NewAdamW([]*Param{p, q}, cfg)
	type ref struct{ p, m, v []float64 }
	refs := []ref{}
	for _, x := range []*Param{p, q} {
		rr := ref{make([]float64, len(x.Data)), make([]float64, len(x.Data)), make([]float64, len(x.Data))}
		for i, v := range x.Data {
			rr.p[i] = float64(v)
		}
		refs = append(refs, rr)
	}
	for step := 1; step <= 25; step++ {
		lr := 0.01 * (1 + r.Float64())
		for k, x := range []*Param{p, q} {
			decay := k == 0
			for i := range x.Grad {
				g := r.NormFloat64() * math.Exp(r.NormFloat64())
				x.Grad[i] = float32(g)
				g = float64(x.Grad[i])
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
		for k, x := range []*Param{p, q} {
			for i, v := range x.Data {
				if math.Abs(float64(v)-refs[k].p[i]) > 1e-5*(1+math.Abs(refs[k].p[i])) {
					t.Fatalf("step %d %s[%d] = %g, reference %g", step, x.Name, i, v, refs[k].p[i])
				}
			}
		}
	}
	if opt.Steps("proj.weight") != 25 {
		t.Errorf("step count %d", opt.Steps("proj.weight"))
	}
}

func TestDefaultNoDecay(t *testing.T) {
	cases := []struct {
		p    *Param
		want bool
	}{
		{&Param{Name: "layers.0.mlp.up_proj.weight", Shape: []int{4, 4}}, false},
		{&Param{Name: "fc.weight", Shape: []int{4, 8}}, false},
		{&Param{Name: "layers.0.input_layernorm.weight", Shape: []int{4}}, true},
		{&Param{Name: "hidden_norm.weight", Shape: []int{4, 1}}, true},
		{&Param{Name: "q_proj.bias", Shape: []int{4}}, true},
		{&Param{Name: "conv.bias", Shape: []int{4, 1}}, true},
		{&Param{Name: "scale", Shape: []int{}}, true},
		{&Param{Name: "custom.weight", Shape: []int{4, 4}, NoDecay: true}, true},
	}
	for _, c := range cases {
		t.Run(c.p.Name, func(t *testing.T) {
			if got := DefaultNoDecay(c.p); got != c.want {
				t.Fatalf("DefaultNoDecay = %v, want %v", got, c.want)
			}
		})
	}
}

func TestAdamWSaveLoad(t *testing.T) {
	mk := func() []*Param {
		a, b := NewParam("a.weight", 2, 3), NewParam("b.norm", 3)
		for i := range a.Data {
			a.Data[i] = float32(i) - 2.5
		}
		for i := range b.Data {
			b.Data[i] = 1 + float32(i)
		}
		return []*Param{a, b}
	}
	cfg := AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	ps := mk()
	opt := NewAdamW(ps, cfg)
	for s := range 3 {
		for _, p := range ps {
			for i := range p.Grad {
				p.Grad[i] = float32(math.Sin(float64(s*7 + i)))
			}
		}
		opt.Step(0.01)
	}
	dir := t.TempDir()
	if err := opt.Save(dir); err != nil {
		t.Fatal(err)
	}
	ps2 := mk()
	opt2 := NewAdamW(ps2, cfg)
	if err := opt2.Load(dir); err != nil {
		t.Fatal(err)
	}
	for i := range ps {
		copy(ps2[i].Data, ps[i].Data)
		assertSameBits(t, "exp_avg", [][]float32{opt.m[i]}, [][]float32{opt2.m[i]})
		assertSameBits(t, "exp_avg_sq", [][]float32{opt.v[i]}, [][]float32{opt2.v[i]})
		if opt.steps[i] != opt2.steps[i] {
			t.Fatalf("steps %d vs %d", opt.steps[i], opt2.steps[i])
		}
	}
	// Same next step from both.
	for k, p := range [][]*Param{ps, ps2} {
		for _, x := range p {
			for i := range x.Grad {
				x.Grad[i] = 0.5 - float32(i)
			}
		}
		[]*AdamW{opt, opt2}[k].Step(0.02)
	}
	assertSameBits(t, "after load", snapshot(ps), snapshot(ps2))

	t.Run("hyper-parameter-mismatch", func(t *testing.T) {
		c := cfg
		c.Beta2 = 0.999
		err := NewAdamW(mk(), c).Load(dir)
		if err == nil || !strings.Contains(err.Error(), "beta2") || !strings.Contains(err.Error(), OptimizerStateFile) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("shape-mismatch", func(t *testing.T) {
		other := []*Param{NewParam("a.weight", 3, 2), NewParam("b.norm", 3)}
		err := NewAdamW(other, cfg).Load(dir)
		if err == nil || !strings.Contains(err.Error(), `"a.weight.exp_avg"`) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("missing-param", func(t *testing.T) {
		other := append(mk(), NewParam("c.weight", 2))
		err := NewAdamW(other, cfg).Load(dir)
		if err == nil || !strings.Contains(err.Error(), `"c.weight"`) {
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
