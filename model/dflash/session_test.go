package dflash

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

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
			ss = append(ss, &Session{Train: ex, BatchSize: global / ranks, Seed: seed, Collective: g.Rank(r)})
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

// TestSessionDataParallel: a drafter trained by train.Run on 2 and 3
// in-process ranks (train.LocalGroup), each with its share of the global
// batch, ends with the parameters of one rank trained on the whole batch:
// the same data, the same anchors per example (ExampleAnchors) and the loss
// normalised over the global batch (Session.lossShare), so only the float32
// summation order differs (1e-5 relative to the largest parameter).
func TestSessionDataParallel(t *testing.T) {
	seed := testseed.Seed(t)
	m, ex := tinyTargetData(t, seed, 14, true)
	const global, steps = 6, 5
	train6 := func(ranks int) []float32 {
		cfg := train.DefaultConfig()
		cfg.Out, cfg.Steps, cfg.WarmupSteps, cfg.LR, cfg.Seed = t.TempDir(), steps, 1, 0.5, seed
		// AdamW's first steps are about ±lr whatever the gradient's size, so
		// rounding flips tiny gradients' updates; a large eps makes the update
		// about lr·m, linear in the gradient, so that the comparison is tight.
		cfg.Eps = 1
		cfg.EvalEvery, cfg.SaveEvery, cfg.Progress, cfg.Plot = 0, 0, "off", false
		g := train.NewLocalGroup(ranks, time.Minute)
		sessions := make([]*Session, ranks)
		errs := make([]error, ranks)
		var wg sync.WaitGroup
		for r := range ranks {
			backend := tensor.NewCPU[float32](1)
			c := DrafterConfigFor(m, 1, []int{1, 2}, 4, 59)
			c.NumAnchors = 4
			s := &Session{Drafter: New[float32](c, rand.New(rand.NewPCG(seed, 2))), Head: HeadOf(m),
				Hidden: TargetHidden(m, c.TargetLayerIDs, backend), Backend: backend, Train: ex, Eval: ex[:2],
				BatchSize: global / ranks, Seed: seed}
			h := s.Hooks()
			if ranks > 1 {
				s.Collective = g.Rank(r)
				h.Collective = s.Collective
			}
			sessions[r] = s
			wg.Go(func() { _, errs[r] = train.Run(context.Background(), cfg, h) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		return slices.Clone(sessions[0].Drafter.Arena().HostValues())
	}
	want := train6(1)
	var scale float64
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	for _, ranks := range []int{2, 3} {
		got := train6(ranks)
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*scale {
				t.Fatalf("%d ranks: parameter %d is %v, one rank with the whole batch %v", ranks, i, got[i], want[i])
			}
		}
	}
}

// tinyTargetData returns a small random Qwen3 target (vocabulary 60; the
// drafter's mask token is 59) and n examples of 12 to 31 tokens whose last
// two thirds are the assistant's, with holes in the mask when holes is set.
func tinyTargetData(t *testing.T, seed uint64, n int, holes bool) (*model.Model, []Example) {
	t.Helper()
	m, err := model.New(model.Config{Arch: model.Qwen3, VocabSize: 60, HiddenSize: 32, IntermediateSize: 48,
		NumLayers: 4, NumHeads: 2, NumKVHeads: 1, HeadDim: 16, RMSNormEps: 1e-6, RopeTheta: 10000,
		MaxPositionEmbeddings: 512}, seed)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var ex []Example
	for range n {
		l := 12 + rng.IntN(20)
		e := Example{IDs: make([]int32, l), Mask: make([]uint8, l)}
		for j := range e.IDs {
			e.IDs[j] = int32(rng.IntN(58))
			if j >= l/3 && (!holes || rng.IntN(4) > 0) {
				e.Mask[j] = 1
			}
		}
		ex = append(ex, e)
	}
	return m, ex
}
