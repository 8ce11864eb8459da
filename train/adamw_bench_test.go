package train

import (
	"fmt"
	"testing"

	"dflash/tensor"
)

// BenchmarkAdamWStep times one AdamW step over a demo-target-sized parameter
// set (about 213k values in 30 tensors of mixed sizes, norms among them).
//
//	go test -run '^$' -bench AdamWStep ./train/
func BenchmarkAdamWStep(b *testing.B) {
	var decls []any
	for i := range 10 {
		decls = append(decls, fmt.Sprintf("l%d.proj.weight", i), []int{96, 192}, fmt.Sprintf("l%d.norm.weight", i), []int{96},
			fmt.Sprintf("l%d.out.weight", i), []int{32, 64})
	}
	a := testArena(decls...)
	for j := range a.HostValues() {
		a.HostValues()[j], a.HostGrad()[j] = float32(j%7)*0.1, float32(j%5)*0.01-0.02
	}
	p, err := NewParams(testCPU, a, tensor.AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		p.Step(1e-3)
	}
}
