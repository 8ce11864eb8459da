package tensorcuda

import (
	"fmt"
	"math"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/checkreport"
	"dflash/train"
)

// TestGPUAdamW runs several steps of the fused kernel and of train.AdamW
// (float64 arithmetic on fp32 state) on the same fp32 weights and gradients:
// the weights must agree to 1e-6 relative (the kernel repeats the CPU's
// operations in order, so they are expected to be bitwise equal; the count
// is logged), and the bf16 copy must be the rounding of the weights.
func TestGPUAdamW(t *testing.T) {
	forDTypes(t, func(e *env) {
		shapes := []struct {
			name  string
			shape []int
		}{
			{"layers.0.mlp.weight", []int{33, 7}}, {"layers.0.input_norm.weight", []int{33}},
			{"fc.weight", []int{300, 250}}, {"head.bias", []int{1}}, {"layers.1.q.weight", []int{17, 64}},
		}
		var params []*train.Param
		var segs []AdamWSegment
		total := int64(0)
		for _, s := range shapes {
			p := train.NewParam(s.name, s.shape...)
			for i := range p.Data {
				p.Data[i] = float32(e.r.NormFloat64() * 0.1)
			}
			params = append(params, p)
			segs = append(segs, AdamWSegment{Start: total, End: total + int64(len(p.Data))})
			total += int64(len(p.Data))
		}
		cfg := train.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
		opt := train.NewAdamW(params, cfg)
		for i, p := range params {
			segs[i].Decay = opt.Decays(p.Name)
		}
		l, err := NewAdamWLayout(segs, total)
		e.check(err)
		table := e.alloc(int64(8*len(l.Table)), 0)
		e.check(gpu.Upload(e.d, table, l.Table))

		flat := func(get func(*train.Param) []float32) []float32 {
			var f []float32
			for _, p := range params {
				f = append(f, get(p)...)
			}
			return f
		}
		pb := e.alloc(4*total, 0)
		e.check(gpu.Upload(e.d, pb, flat(func(p *train.Param) []float32 { return p.Data })))
		gb, mb, vb := e.alloc(4*total, 0), e.alloc(4*total, 0), e.alloc(4*total, 0)
		var p16 gpu.Buffer // bf16 copy written only in the bf16 run
		if e.dt == dtype.BF16 {
			p16 = e.alloc(2*total, 0xff)
		}
		const steps = 6
		for k := int64(1); k <= steps; k++ {
			gs := math.Pow(10, float64(e.r.IntN(5)-3)) // gradients of 1e-3 .. 10
			for _, p := range params {
				for i := range p.Grad {
					p.Grad[i] = float32(e.r.NormFloat64() * gs)
				}
			}
			e.check(gpu.Upload(e.d, gb, flat(func(p *train.Param) []float32 { return p.Grad })))
			lr := 1e-3 * float64(k)
			opt.Step(lr)
			e.check(e.o.AdamW(l, table, pb, gb, mb, vb, p16, AdamWStep{LR: lr, Beta1: cfg.Beta1, Beta2: cfg.Beta2,
				Eps: cfg.Eps, WeightDecay: cfg.WeightDecay, Step: k}))
		}
		got := make([]float32, total)
		e.check(gpu.Download(e.d, got, pb))
		want := flat(func(p *train.Param) []float32 { return p.Data })
		worst, equal := 0.0, 0
		for i := range want {
			if got[i] == want[i] {
				equal++
			}
			err := math.Abs(float64(got[i])-float64(want[i])) / max(math.Abs(float64(want[i])), 1e-30)
			if err > worst || math.IsNaN(float64(got[i])) {
				worst = max(err, worst)
				if math.IsNaN(float64(got[i])) {
					worst = math.Inf(1)
				}
			}
		}
		detail := fmt.Sprintf("%d steps, %d weights, %d bitwise equal, max rel err %.3g (tol 1e-6)", steps, total, equal, worst)
		checkreport.Write(e.t, "tensorcuda", e.dt.String()+" AdamW vs train.AdamW", worst <= 1e-6, detail,
			map[string]float64{"max_rel_err": worst, "bitwise_equal_frac": float64(equal) / float64(total)})
		if worst > 1e-6 {
			e.t.Errorf("AdamW weights differ from train.AdamW: %s", detail)
		}
		if p16.Ptr != 0 {
			h := make([]uint16, total)
			e.check(gpu.Download(e.d, h, p16))
			for i, v := range got {
				if h[i] != dtype.Float32ToBF16(v) {
					e.t.Errorf("bf16 copy %d: %#04x, want %#04x (bf16 of %g)", i, h[i], dtype.Float32ToBF16(v), v)
					break
				}
			}
		}
	})
}
