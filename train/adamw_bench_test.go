package train

import (
	"fmt"
	"testing"
)

// BenchmarkAdamWStep times one AdamW step over a demo-target-sized parameter
// set (about 213k values in 30 tensors of mixed sizes, norms among them).
//
//	go test -run '^$' -bench AdamWStep ./train/
func BenchmarkAdamWStep(b *testing.B) {
	var ps []*Param
	for i := range 10 {
		for _, p := range []*Param{NewParam(fmt.Sprintf("l%d.proj.weight", i), 96, 192), NewParam(fmt.Sprintf("l%d.norm.weight", i), 96), NewParam(fmt.Sprintf("l%d.out.weight", i), 32, 64)} {
			for j := range p.Data {
				p.Data[j], p.Grad[j] = float32(j%7)*0.1, float32(j%5)*0.01-0.02
			}
			ps = append(ps, p)
		}
	}
	opt := NewAdamW(ps, AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	for b.Loop() {
		opt.Step(1e-3)
	}
}
