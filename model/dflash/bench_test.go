package dflash

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"dflash/model"
	"dflash/tensor"
)

// BenchmarkDrafterStep times one drafter training step (forward, backward)
// at a configuration larger than the demo's: a Qwen3-style target of hidden
// 512 (8 heads, 2 kv heads, head dim 64, vocab 8192), a 2-layer drafter with
// 3 taps, block 16, 64 anchors, one sequence of 1024 tokens whose hidden
// states are given (the target is not run). It reports context tokens/s and
// draft positions/s.
//
//	go test -run '^$' -bench DrafterStep -benchtime 5x ./model/dflash/
func BenchmarkDrafterStep(b *testing.B) {
	const S, anchors = 1024, 64
	m, err := model.New(model.Config{Arch: model.Qwen3, VocabSize: 8192, HiddenSize: 512, IntermediateSize: 1536,
		NumLayers: 6, NumHeads: 8, NumKVHeads: 2, HeadDim: 64, RMSNormEps: 1e-6, RopeTheta: 1e6,
		MaxPositionEmbeddings: 4096}, 1)
	if err != nil {
		b.Fatal(err)
	}
	c := DrafterConfigFor(m, 2, []int{1, 3, 5}, 16, 8191)
	c.NumAnchors = anchors
	d := New[float32](c, rand.New(rand.NewPCG(1, 2)))
	rng := rand.New(rand.NewPCG(3, 4))
	batch := &Batch{Rows: 1, Len: S, IDs: make([]int32, S), LossMask: make([]uint8, S), SeqLen: []int{S}}
	for i := range batch.IDs {
		batch.IDs[i] = int32(rng.IntN(8000))
		if i >= S/8 {
			batch.LossMask[i] = 1
		}
	}
	for range c.TargetLayerIDs {
		h := make([]float32, S*c.HiddenSize)
		for i := range h {
			h[i] = float32(rng.NormFloat64())
		}
		batch.Taps = append(batch.Taps, tensor.FromData(fmt.Sprintf("tap%d", len(batch.Taps)), h, S, c.HiddenSize))
	}
	backend := tensor.NewCPU[float32](0)
	head := HeadOf(m)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bl := BuildBlocks(c, batch, SampleBatchAnchors(rng, batch, anchors))
		tp := tensor.NewTape(backend)
		out, err := d.Forward(tp, true, head, batch, bl)
		if err != nil {
			b.Fatal(err)
		}
		tp.Backward(out.Loss)
		for _, p := range d.Params() {
			p.ZeroGrad()
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(S/sec, "ctx-tokens/s")
	b.ReportMetric(anchors*16/sec, "draft-pos/s")
}
