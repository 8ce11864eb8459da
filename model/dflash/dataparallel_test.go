package dflash_test

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
	"dflash/model/dflash"
	"dflash/recipe"
	"dflash/tensor"
	"dflash/train"
)

// TestSessionDataParallel: a drafter trained by train.Run on 2 and 3
// in-process ranks (train.LocalGroup), each with its share of the global
// batch, ends with the parameters of one rank trained on the whole batch:
// the same data, the same anchors per example (ExampleAnchors) and the loss
// normalised over the global batch (the session's loss share), so only the float32
// summation order differs (1e-5 relative to the largest parameter). The
// same holds for packed rows: the ranks share each global batch's rows.
func TestSessionDataParallel(t *testing.T) {
	seed := testseed.Seed(t)
	m, ex := dflash.TinyTargetData(t, seed, 14, true)
	const global, steps = 6, 5
	packing, err := dflash.NewPacking(ex, ex[:2], 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	train6 := func(ranks int, pack *dflash.Packing) []float32 {
		cfg := train.DefaultConfig()
		cfg.Out, cfg.Steps, cfg.WarmupSteps, cfg.LR, cfg.Seed = t.TempDir(), steps, 1, 0.5, seed
		// AdamW's first steps are about ±lr whatever the gradient's size, so
		// rounding flips tiny gradients' updates; a large eps makes the update
		// about lr·m, linear in the gradient, so that the comparison is tight.
		cfg.Eps = 1
		cfg.EvalEvery, cfg.SaveEvery, cfg.Progress, cfg.Plot = 0, 0, "off", false
		g := train.NewLocalGroup(ranks, time.Minute)
		sessions := make([]*dflash.Session, ranks)
		errs := make([]error, ranks)
		var wg sync.WaitGroup
		for r := range ranks {
			backend := tensor.NewCPU[float32](1)
			c := dflash.DrafterConfigFor(m, 1, []int{1, 2}, 4, 59)
			c.NumAnchors = 4
			s := &dflash.Session{Drafter: dflash.New[float32](c, rand.New(rand.NewPCG(seed, 2))), Head: dflash.HeadOf(m),
				Hidden: dflash.TargetHidden(m, c.TargetLayerIDs, backend), Backend: backend, Train: ex, Eval: ex[:2],
				BatchSize: global / ranks, Seed: seed, Pack: pack}
			var coll train.Collective
			if ranks > 1 {
				coll = g.Rank(r)
			}
			h := recipe.Hooks(s, coll)
			sessions[r] = s
			wg.Go(func() { _, errs[r] = train.Run(context.Background(), cfg, h) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		return slices.Clone(sessions[0].Drafter.Arena().HostValues())
	}
	for _, pack := range []*dflash.Packing{nil, &packing} {
		want := train6(1, pack)
		var scale float64
		for _, v := range want {
			scale = max(scale, math.Abs(float64(v)))
		}
		for _, ranks := range []int{2, 3} {
			got := train6(ranks, pack)
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*scale {
					t.Fatalf("%d ranks, packed %v: parameter %d is %v, one rank with the whole batch %v", ranks, pack != nil, i, got[i], want[i])
				}
			}
		}
	}
}
