package model

import (
	"testing"

	"dflash/tensor"
)

// BenchmarkTrainStep measures a forward + backward of the chunked LM loss on
// a small Qwen3 (hidden 256, 4 layers, vocab 4096) over 4×128 tokens; it
// reports tokens/s. Run: go test -run '^$' -bench TrainStep ./model/
func BenchmarkTrainStep(b *testing.B) {
	cfg := Config{Arch: Qwen3, VocabSize: 4096, HiddenSize: 256, IntermediateSize: 768, NumLayers: 4, NumHeads: 4,
		NumKVHeads: 2, HeadDim: 64, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 512, TieWordEmbeddings: true}
	m, err := New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	const batch, length = 4, 128
	ids := make([]int32, batch*length)
	for i := range ids {
		ids[i] = int32((i * 7919) % cfg.VocabSize)
	}
	targets := NextTokenTargets(ids, batch, length)
	cpu := tensor.NewCPU[float32](0)
	for b.Loop() {
		tp := tensor.NewTape(cpu)
		out := m.Forward(tp, Input{IDs: ids, Batch: batch, Len: length})
		tp.Backward(m.Loss(tp, out.Final, targets, nil, 0).Loss)
		m.ZeroGrad()
	}
	b.ReportMetric(float64(b.N*batch*length)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkGenerate measures greedy decoding with the KV cache, one token at
// a time, on a small Qwen3 (hidden 256, 4 layers, vocab 4096): a 16-token
// prompt and 128 new tokens per iteration; it reports new tokens/s. Run:
// go test -run '^$' -bench Generate -benchtime 3x ./model/
func BenchmarkGenerate(b *testing.B) {
	cfg := Config{Arch: Qwen3, VocabSize: 4096, HiddenSize: 256, IntermediateSize: 768, NumLayers: 4, NumHeads: 4,
		NumKVHeads: 2, HeadDim: 64, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 512}
	m, err := New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	prompt := make([]int32, 16)
	for i := range prompt {
		prompt[i] = int32((i * 7919) % cfg.VocabSize)
	}
	const newTokens = 128
	cpu := tensor.NewCPU[float32](0)
	for b.Loop() {
		out, err := m.Generate(cpu, prompt, GenerateOptions{MaxNewTokens: newTokens})
		if err != nil {
			b.Fatal(err)
		}
		if len(out) != newTokens {
			b.Fatalf("generated %d tokens, want %d", len(out), newTokens)
		}
	}
	b.ReportMetric(float64(b.N*newTokens)/b.Elapsed().Seconds(), "tokens/s")
}
