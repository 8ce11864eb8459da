package dflash

import (
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/internal/testseed"
	"dflash/model"
	"dflash/tensor"
	"dflash/train"
)

// TestSessionHiddenCache checks that cached target hidden states give the
// same training losses and evaluation as running the target every time.
func TestSessionHiddenCache(t *testing.T) {
	seed := testseed.Seed(t)
	m, ex := tinyTargetData(t, seed, 10, false)
	backend := tensor.NewCPU[float32](2)
	run := func(cache bool) ([]float64, float64) {
		c := DrafterConfigFor(m, 1, []int{1, 2}, 4, 59)
		c.NumAnchors = 5
		s := &Session{Drafter: New[float32](c, rand.New(rand.NewPCG(seed, 2))), Head: HeadOf(m),
			Hidden: TargetHidden(m, c.TargetLayerIDs, backend), Backend: backend, Train: ex[2:], Eval: ex[:2],
			BatchSize: 3, Pad: 0, Seed: seed, CacheHidden: cache}
		arng := rand.New(rand.NewPCG(seed, 3))
		var losses []float64
		for step := 0; step < 8; step++ { // several epochs: batches recombine examples
			l, _, _, err := s.Step(arng)
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, l)
			for _, p := range s.Drafter.Params() {
				p.ZeroGrad()
			}
		}
		ev, err := s.Evaluate()
		if err != nil {
			t.Fatal(err)
		}
		return losses, ev.Loss()
	}
	a, ea := run(false)
	b, eb := run(true)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("step %d: loss %v without cache, %v with", i, a[i], b[i])
		}
	}
	if ea != eb {
		t.Fatalf("eval loss %v without cache, %v with", ea, eb)
	}
	// The frozen head shares the target's values and never takes gradients.
	if m.Embed.Grad() != nil && anyNonZero(m.Embed.Grad()) {
		t.Fatal("the target's embedding received gradients")
	}
}

func anyNonZero(v []float32) bool {
	for _, x := range v {
		if x != 0 {
			return true
		}
	}
	return false
}

// TestSessionShards: the sessions of 2 and 3 data-parallel ranks, each with
// the per-rank batch, take between them exactly the batches of one session
// with the global batch, and their data position is the global one.
func TestSessionShards(t *testing.T) {
	seed := testseed.Seed(t)
	ex := make([]Example, 25)
	const global = 6
	one := &Session{Train: ex, BatchSize: global, Seed: seed}
	var want [][]int
	for range 9 {
		want = append(want, slices.Clone(one.trainOrder().Next()))
	}
	wantPos, err := one.trainOrder().State()
	if err != nil {
		t.Fatal(err)
	}
	for _, ranks := range []int{2, 3} {
		g := train.NewLocalGroup(ranks, 0)
		var ss []*Session
		for r := range ranks {
			ss = append(ss, &Session{Train: ex, BatchSize: global / ranks, Seed: seed, Ranks: g.Rank(r)})
		}
		for b, w := range want {
			var got []int
			for _, s := range ss {
				got = append(got, s.trainOrder().Next()...)
			}
			if !slices.Equal(got, w) {
				t.Fatalf("%d ranks, batch %d: %v, want %v", ranks, b, got, w)
			}
		}
		for r, s := range ss {
			if pos, _ := s.trainOrder().State(); string(pos) != string(wantPos) {
				t.Fatalf("%d ranks: rank %d at %s, one rank at %s", ranks, r, pos, wantPos)
			}
		}
	}
}

// tinyTargetData returns a small random Qwen3 target (tinyTarget, 512
// positions) and n examples of 12 to 31 tokens (randomExamples).
func tinyTargetData(t *testing.T, seed uint64, n int, holes bool) (*model.Model, []Example) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	return tinyTarget(t, seed, 512), randomExamples(rng, n, func(int) int { return 12 + rng.IntN(20) }, holes)
}

// tinyTarget returns a small random Qwen3 target of maxPos positions,
// vocabulary 60 (the drafter's mask token is 59).
func tinyTarget(t *testing.T, seed uint64, maxPos int) *model.Model {
	t.Helper()
	m, err := model.New(model.Config{Arch: model.Qwen3, VocabSize: 60, HiddenSize: 32, IntermediateSize: 48,
		NumLayers: 4, NumHeads: 2, NumKVHeads: 1, HeadDim: 16, RMSNormEps: 1e-6, RopeTheta: 10000,
		MaxPositionEmbeddings: maxPos}, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// randomExamples returns n examples, the i-th of length(i) tokens, of
// random ids below 58 from rng, whose last two thirds are the assistant's,
// with holes in the mask when holes is set.
func randomExamples(rng *rand.Rand, n int, length func(i int) int, holes bool) []Example {
	var ex []Example
	for i := range n {
		l := length(i)
		e := Example{IDs: make([]int32, l), Mask: make([]uint8, l)}
		for j := range e.IDs {
			e.IDs[j] = int32(rng.IntN(58))
			if j >= l/3 && (!holes || rng.IntN(4) > 0) {
				e.Mask[j] = 1
			}
		}
		ex = append(ex, e)
	}
	return ex
}
