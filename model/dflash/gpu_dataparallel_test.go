package dflash_test

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/rngstream"
	"dflash/internal/testseed"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/recipe"
	"dflash/train"
	"dflash/train/traincuda"
)

// dpRun is what one rank of a data-parallel GPU run saw: its master
// weights before every step and after the last, and the run's losses.
type dpRun struct {
	weights [][]float32
	losses  []float64
}

// TestGPUDataParallel trains a small drafter (head dim 64, the target of
// cmd/dflash's TestWriteTrainFixture) for a few steps on two GPUs, two
// ranks of one process through NCCL (traincuda.RunRanks), and on one GPU
// with the same global batch as two micro-batches (gradient accumulation
// 2: the two ranks' shards, in order), all from the same seed. Anchors
// cover every candidate position, so that no rank's anchor draw depends on
// the RNG's position.
//
// Checks: (1) after every step both ranks' fp32 master weights are equal
// bit for bit (the all-reduce gives every rank the same sum, and the
// update is the same); (2) the first step's loss is the one-GPU loss (the
// same forward passes on the same weights) within 1e-6 relative; (3) the
// later losses within 1e-2 relative and the weights within bf16
// tolerance: the RMS difference from the one-GPU weights at most 5% of
// the RMS change the training made. The one-GPU run sums the micro-batch
// gradients by accumulating in the backward pass, the ranks by NCCL after
// it: fp32 sums in a different order, whose last-bit differences can flip
// the bf16 rounding of a compute weight, after which the runs drift by
// bf16 steps (2⁻⁸ relative) in the affected activations.
func TestGPUDataParallel(t *testing.T) {
	if n, err := gpu.Count(); err != nil || n < 2 {
		t.Skipf("needs 2 GPUs (found %d: %v)", n, err)
	}
	cache := gputest.NVRTCCache(t, "")
	seed := testseed.Seed(t)
	tc, ex := gpuTestData(seed, 24, 25)
	const steps, batch = 5, 2
	cfg := train.DefaultConfig()
	cfg.Steps, cfg.Seed, cfg.LR, cfg.WarmupSteps = steps, seed, 1e-3, 0
	cfg.EvalEvery, cfg.SaveEvery, cfg.Progress, cfg.Plot = 0, 0, "off", false

	// rank trains one rank on env: its target and same-seed drafter.
	rank := func(env traincuda.RankEnv, cfg train.Config, out *dpRun) error {
		target, err := model.New(tc, 5)
		if err != nil {
			return err
		}
		target.Arena().Place(env.Backend, false)
		dc := dflash.DrafterConfigFor(target, 2, nil, 8, tc.VocabSize-1)
		dc.NumAnchors = 64 // more than any sequence's candidates: every one is an anchor
		d := dflash.New[float32](dc, rand.New(rand.NewPCG(seed, rngstream.Init)))
		d.Arena().Place(env.Backend, true)
		s := &dflash.Session{Drafter: d, Head: dflash.HeadOf(target), Hidden: dflash.TargetHidden(target, dc.TargetLayerIDs, env.Backend), Backend: env.Backend,
			Train: ex, Eval: ex[:2], BatchSize: batch, Seed: seed}
		snap := func() {
			w := make([]float32, d.Arena().Len())
			env.Backend.Download(d.Arena().Values, w)
			out.weights = append(out.weights, w)
		}
		h := recipe.Hooks(s, env.Collective)
		step := h.Step
		h.Step = func(ctx context.Context, si train.StepInfo) (float64, map[string]float64, int, error) {
			if si.Micro == 0 {
				snap()
			}
			return step(ctx, si)
		}
		if _, err := train.Run(context.Background(), cfg, h); err != nil {
			return err
		}
		snap()
		if env.Rank == 0 {
			recs, err := train.ReadMetrics(filepath.Join(cfg.Out, train.MetricsFile))
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.Kind == "train" {
					out.losses = append(out.losses, r.Values["loss"])
				}
			}
		}
		return nil
	}

	dp := make([]dpRun, 2)
	dpCfg := cfg
	dpCfg.Out = t.TempDir()
	two := traincuda.Placement{Ranks: []int{0, 1}, GPUs: []int{0, 1}, World: 2, Comm: traincuda.LocalComm}
	if err := traincuda.RunRanks(context.Background(), cache, two, 0, func(env traincuda.RankEnv) error {
		return rank(env, dpCfg, &dp[env.Rank])
	}); err != nil {
		t.Fatal(err)
	}
	var ref dpRun
	refCfg := cfg
	refCfg.Out, refCfg.GradAccum = t.TempDir(), 2
	one := traincuda.Placement{Ranks: []int{0}, GPUs: []int{0}, World: 1, Comm: traincuda.NoComm}
	if err := traincuda.RunRanks(context.Background(), cache, one, 0, func(env traincuda.RankEnv) error {
		return rank(env, refCfg, &ref)
	}); err != nil {
		t.Fatal(err)
	}

	if len(dp[0].weights) != steps+1 || len(dp[1].weights) != steps+1 || len(ref.weights) != steps+1 || len(dp[0].losses) != steps || len(ref.losses) != steps {
		t.Fatalf("snapshots %d %d %d, losses %d %d: want %d and %d", len(dp[0].weights), len(dp[1].weights), len(ref.weights),
			len(dp[0].losses), len(ref.losses), steps+1, steps)
	}
	if !slices.Equal(dp[0].weights[0], ref.weights[0]) {
		t.Fatal("initial weights differ between the runs")
	}
	for s := range steps + 1 {
		if i := firstDiff(dp[0].weights[s], dp[1].weights[s]); i >= 0 {
			t.Fatalf("after step %d the ranks' master weights differ at %d: %g and %g", s, i, dp[0].weights[s][i], dp[1].weights[s][i])
		}
	}
	for s := range steps {
		tol := 1e-2
		if s == 0 {
			tol = 1e-6
		}
		l, r := dp[0].losses[s], ref.losses[s]
		t.Logf("step %d: loss two GPUs %.6f, one GPU %.6f", s+1, l, r)
		if math.Abs(l-r) > tol*math.Abs(r) {
			t.Errorf("step %d: loss %.6f on two GPUs, %.6f on one: beyond %g relative", s+1, l, r, tol)
		}
	}
	diff, moved := rms(dp[0].weights[steps], ref.weights[steps]), rms(ref.weights[steps], ref.weights[0])
	t.Logf("after %d steps: RMS weight difference %.3g, RMS change of training %.3g", steps, diff, moved)
	if moved == 0 || diff > 0.05*moved {
		t.Errorf("RMS weight difference %.3g from one GPU: beyond 5%% of the training's change %.3g", diff, moved)
	}
}

func firstDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// rms returns the root mean square of a-b.
func rms(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s / float64(len(a)))
}

// gpuTestData returns the GPU tests' small Qwen3 target config (head dim
// 64) and count random examples of 16 to 16+spread−1 tokens, the last two
// thirds of each supervised.
func gpuTestData(seed uint64, count, spread int) (model.Config, []dflash.Example) {
	tc := model.Config{Arch: model.Qwen3, VocabSize: 300, HiddenSize: 128, IntermediateSize: 256,
		NumLayers: 4, NumHeads: 2, NumKVHeads: 1, HeadDim: 64, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 1024}
	rng := rand.New(rand.NewPCG(seed, 7))
	ex := make([]dflash.Example, count)
	for i := range ex {
		n := 16 + rng.IntN(spread)
		ex[i] = dflash.Example{IDs: make([]int32, n), Mask: make([]uint8, n)}
		for j := range n {
			ex[i].IDs[j] = int32(rng.IntN(tc.VocabSize - 1))
			if j >= n/3 {
				ex[i].Mask[j] = 1
			}
		}
	}
	return tc, ex
}
