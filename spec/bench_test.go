package spec

import (
	"context"
	"math/rand/v2"
	"testing"

	"dflash/internal/cputime"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
)

// demoShape returns a target and a DFlash drafter of the demo's default
// shapes (demo.Defaults: Qwen3, vocab 1024, hidden 128, 4 layers, 4 query
// and 2 KV heads; a 1-layer drafter with block 8 reading layers 1 and 2),
// with random weights: the per-call costs of decoding do not depend on
// what the weights learned.
func demoShape(tb testing.TB, b tensor.Backend[float32]) (*model.Model, *DFlash) {
	tb.Helper()
	cfg := model.Config{Arch: model.Qwen3, VocabSize: 1024, HiddenSize: 128, IntermediateSize: 384, NumLayers: 4,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 32, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 4096, InitializerRange: 0.02}
	m, err := model.New(cfg, 1)
	if err != nil {
		tb.Fatal(err)
	}
	c := dflash.DrafterConfigFor(m, 1, []int{1, 2}, 8, cfg.VocabSize-1)
	d, err := NewDFlash(m, dflash.New[float32](c, rand.New(rand.NewPCG(1, 2))), b)
	if err != nil {
		tb.Fatal(err)
	}
	return m, d
}

// BenchmarkDemoShape times the parts of a speculative decoding round on
// the demo's shapes after a 64-token prompt: one plain decode step (what
// the baseline pays per token), one verification of a block of 8, one
// drafter proposal and one drafter Extend of 3 positions (an average
// acceptance). Besides ns/op (wall time, which other processes on a
// shared machine inflate) it reports cpu-us/op, the process CPU time per
// operation. Run: go test -run '^$' -bench DemoShape ./spec/
func BenchmarkDemoShape(b *testing.B) {
	cpu := tensor.NewCPU[float32](0)
	m, d := demoShape(b, cpu)
	prompt := make([]int32, 64)
	for i := range prompt {
		prompt[i] = int32(i * 37 % m.Config.VocabSize)
	}
	states := []int{2, 3}
	prefill := func() (*model.Cache, Sequence) {
		cache := m.NewCache()
		_, hidden := m.Prefill(cpu, cache, prompt, states)
		seq := d.Start()
		seq.Extend(taps(hidden, states, 0, len(prompt)))
		return cache, seq
	}
	run := func(name string, f func(b *testing.B)) {
		b.Run(name, func(b *testing.B) {
			c0 := cputime.Seconds()
			f(b)
			b.ReportMetric((cputime.Seconds()-c0)*1e6/float64(b.N), "cpu-us/op")
		})
	}
	run("step", func(b *testing.B) {
		cache, _ := prefill()
		for b.Loop() {
			m.Step(cpu, cache, prompt[:1])
			cache.Truncate(len(prompt))
		}
	})
	run("verify8", func(b *testing.B) {
		cache, _ := prefill()
		for b.Loop() {
			m.Decode(cpu, cache, prompt[:8], states)
			cache.Truncate(len(prompt))
		}
	})
	run("propose", func(b *testing.B) {
		_, seq := prefill()
		for b.Loop() {
			seq.Propose(prompt[0])
		}
	})
	run("extend3", func(b *testing.B) {
		cache, _ := prefill()
		_, hidden := m.Prefill(cpu, cache, prompt[:3], states)
		h := taps(hidden, states, 0, 3)
		for b.Loop() {
			seq := &dflashSeq{f: d, ctx: d.D.NewContext()} // a fresh context: Extend never rolls back
			seq.Extend(h)
		}
	})
	run("generate96", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Generate(cpu, prompt, model.GenerateOptions{MaxNewTokens: 96}); err != nil {
				b.Fatal(err)
			}
		}
	})
	run("spec96", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := Generate(context.Background(), cpu, m, d, prompt, Options{MaxNewTokens: 96}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
