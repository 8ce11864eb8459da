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

// demoConfig is the demo's default target (demo.Defaults: Qwen3, vocab
// 1024, hidden 128, 4 layers, 4 query and 2 KV heads of 32; 1.05M
// parameters, 4.2 MB: it stays in the CPU caches).
var demoConfig = model.Config{Arch: model.Qwen3, VocabSize: 1024, HiddenSize: 128, IntermediateSize: 384, NumLayers: 4,
	NumHeads: 4, NumKVHeads: 2, HeadDim: 32, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 4096, InitializerRange: 0.02}

// largeConfig is a target whose weights (hidden 1024, 8 layers, vocab
// 8192; 117M parameters, 470 MB) are far beyond the CPU caches, so that a
// one-token step is bound by reading them.
var largeConfig = model.Config{Arch: model.Qwen3, VocabSize: 8192, HiddenSize: 1024, IntermediateSize: 3072, NumLayers: 8,
	NumHeads: 16, NumKVHeads: 8, HeadDim: 64, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 4096, InitializerRange: 0.02}

// shapeModels returns a target of config cfg and a 1-layer DFlash drafter
// for it (block 8, reading the two layers before the last, as the demo's),
// with random weights: the per-call costs of decoding do not depend on
// what the weights learned.
func shapeModels(tb testing.TB, cfg model.Config, b tensor.Backend[float32]) (*model.Model, *DFlash) {
	tb.Helper()
	m, err := model.New(cfg, 1)
	if err != nil {
		tb.Fatal(err)
	}
	c := dflash.DrafterConfigFor(m, 1, []int{cfg.NumLayers - 3, cfg.NumLayers - 2}, 8, cfg.VocabSize-1)
	d, err := NewDFlash(m, dflash.New[float32](c, rand.New(rand.NewPCG(1, 2))), b)
	if err != nil {
		tb.Fatal(err)
	}
	return m, d
}

// BenchmarkDemoShape times the parts of a speculative decoding round on
// the demo's shapes (demoConfig) after a 64-token prompt: one plain decode
// step (what the baseline pays per token), one verification of a block of
// 8, one drafter proposal and one drafter Extend of 3 positions (an
// average acceptance), and 96-token generations with and without the
// drafter, one prompt and eight at a time (x8: GenerateBatch and
// model.GenerateBatch of eight copies, per op eight prompts). Besides ns/op (wall time, which other processes on a shared
// machine inflate) it reports cpu-us/op, the process CPU time per
// operation. Run: go test -run '^$' -bench DemoShape -cpu 1 ./spec/
func BenchmarkDemoShape(b *testing.B) { benchRound(b, demoConfig, true) }

// BenchmarkLargeShape is BenchmarkDemoShape's per-call part on a target
// whose weights do not fit the caches (largeConfig). Run:
// go test -run '^$' -bench LargeShape -benchtime 10x -cpu 1 ./spec/
func BenchmarkLargeShape(b *testing.B) { benchRound(b, largeConfig, false) }

func benchRound(b *testing.B, cfg model.Config, generate bool) {
	cpu := tensor.NewCPU[float32](0)
	m, d := shapeModels(b, cfg, cpu)
	prompt := make([]int32, 64)
	for i := range prompt {
		prompt[i] = int32(i * 37 % m.Config.VocabSize)
	}
	states := []int{cfg.NumLayers - 2, cfg.NumLayers - 1}
	prefill := func() (*model.Cache, Sequence) {
		cache := m.NewCache(cpu, len(prompt)+8)
		_, hidden := m.Prefill(cpu, cache, prompt, states)
		seq := d.Start(len(prompt) + 8)
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
			d.Propose([]Sequence{seq}, prompt[:1], true)
		}
	})
	run("extend3", func(b *testing.B) {
		cache, _ := prefill()
		_, hidden := m.Prefill(cpu, cache, prompt[:3], states)
		h := taps(hidden, states, 0, 3)
		for b.Loop() {
			seq := &dflashSeq{f: d, ctx: d.D.NewContext(cpu, 3)} // a fresh context: Extend never rolls back
			seq.Extend(h)
		}
	})
	if !generate {
		return
	}
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
	eight := [][]int32{prompt, prompt, prompt, prompt, prompt, prompt, prompt, prompt}
	run("generate96x8", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.GenerateBatch(cpu, eight, model.GenerateOptions{MaxNewTokens: 96}); err != nil {
				b.Fatal(err)
			}
		}
	})
	run("spec96x8", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := GenerateBatch(context.Background(), cpu, m, d, eight, Options{MaxNewTokens: 96}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
