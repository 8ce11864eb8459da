package train

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"dflash/data/order"
	"dflash/internal/rngstream"
	"dflash/internal/testseed"
)

// dpGlobalBatch is the global batch of the data-parallel tests: 1, 2 and 3
// ranks take 6, 3 and 2 examples of it each.
const dpGlobalBatch = 6

// dpTask is one rank of the data-parallel mlp: every rank starts from the
// same weights and takes its share of each global batch of a fixed pool
// (order.Order sharded), labels from the teacher; nothing else is random,
// so R ranks see exactly what one rank with an R-times batch sees.
type dpTask struct {
	m     *mlp
	xs    [][]float64
	ord   *order.Order
	snaps [][][]float32 // parameters at the start of every step
	fail  func(StepInfo) error
}

func newDPTask(seed uint64, rank, ranks int) *dpTask {
	const in, hid, n = 4, 12, 40
	t := &dpTask{m: newMLP(seed, in, hid), ord: order.New(n, dpGlobalBatch, seed, rngstream.Data).Shard(rank, ranks)}
	r := NewRNG(seed, 100)
	for range n {
		x := make([]float64, in)
		for i := range x {
			x[i] = r.NormFloat64()
		}
		t.xs = append(t.xs, x)
	}
	return t
}

func (t *dpTask) hooks(c Collective) Hooks {
	return Hooks{
		Backend:    testCPU,
		Arena:      t.m.arena,
		Collective: c,
		Step: func(ctx context.Context, s StepInfo) (float64, map[string]float64, int, error) {
			if s.Micro == 0 {
				t.snaps = append(t.snaps, snapshot(t.m.params()))
			}
			if t.fail != nil {
				if err := t.fail(s); err != nil {
					return 0, nil, 0, err
				}
			}
			var xs [][]float64
			var ys []float64
			for _, i := range t.ord.Next() {
				xs = append(xs, t.xs[i])
				ys = append(ys, teacher(t.xs[i]))
			}
			loss, acc := t.m.lossGrad(xs, ys)
			s.Count(len(xs), dpFLOPsPerSample*float64(len(xs)))
			return loss, map[string]float64{"acc": acc}, len(xs), nil
		},
		DataState:   t.ord.State,
		RestoreData: t.ord.Restore,
	}
}

// runRanks trains ranks in-process ranks (a LocalGroup; no collective at
// all for ranks == 0, which runs one rank alone) and returns their tasks,
// the errors of their Runs and how long each took.
func runRanks(t *testing.T, seed uint64, ranks int, cfg Config, timeout time.Duration, setup func(rank int, task *dpTask, h *Hooks)) ([]*dpTask, []error, []time.Duration) {
	t.Helper()
	n := max(ranks, 1)
	g := NewLocalGroup(n, timeout)
	tasks := make([]*dpTask, n)
	errs := make([]error, n)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for r := range n {
		tasks[r] = newDPTask(seed, r, n)
		var c Collective
		if ranks > 0 {
			c = g.Rank(r)
		}
		h := tasks[r].hooks(c)
		if setup != nil {
			setup(r, tasks[r], &h)
		}
		wg.Go(func() {
			start := time.Now()
			_, errs[r] = run(context.Background(), cfg, h, &bytes.Buffer{})
			took[r] = time.Since(start)
		})
	}
	wg.Wait()
	return tasks, errs, took
}

func dpConfig(out string, steps int) Config {
	c := testConfig(out, steps)
	c.EvalEvery = 0
	return c
}

// dpFLOPsPerSample is the work a dpTask step counts per example.
const dpFLOPsPerSample = 1e6

// trainLosses reads the loss of every train record of out's metrics.jsonl,
// and checks that its rates are the totals over the ranks: a dpTask counts
// a token, a sample and dpFLOPsPerSample per example, so samples/s equals
// tokens/s and tflops, per rank, is dpFLOPsPerSample·samples/s/ranks
// (not checked when ranks is 0: a run resumed on another rank count).
func trainLosses(t *testing.T, out string, ranks int) []float64 {
	t.Helper()
	recs, err := ReadMetrics(filepath.Join(out, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var l []float64
	for _, r := range recs {
		if r.Kind == "train" {
			l = append(l, r.Values["loss"])
			v := r.Values
			if math.Abs(v["samples_per_s"]/v["tokens_per_s"]-1) > 1e-12 ||
				ranks > 0 && math.Abs(v["tflops"]*1e12*float64(ranks)/(dpFLOPsPerSample*v["samples_per_s"])-1) > 1e-12 {
				t.Fatalf("step %d: samples/s %g, tokens/s %g, tflops %g with %d ranks", r.Step, v["samples_per_s"], v["tokens_per_s"], v["tflops"], ranks)
			}
		}
	}
	return l
}

// dpTol is the agreement (absolute plus relative) of parameters and losses
// between runs that sum the same gradients in different float32 orders: a
// rank's mean of b examples, then the sum over ranks times 1/ranks, against
// one mean of ranks*b. These differ by float32 roundings of the gradient,
// which AdamW's normalised update carries into the weights; after 10 steps
// at lr 3e-2 the observed differences are at most 6e-8 (one ulp of the
// weights), and dpTol leaves a wide margin for other seeds.
const dpTol = 1e-5

func assertClose(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	var worst float64
	for i := range want {
		for j := range want[i] {
			d := math.Abs(float64(got[i][j]) - float64(want[i][j]))
			if d > dpTol*(1+math.Abs(float64(want[i][j]))) {
				t.Fatalf("%s: tensor %d element %d: %v, want %v (diff %.3g)", what, i, j, got[i][j], want[i][j], d)
			}
			worst = max(worst, d)
		}
	}
	t.Logf("%s: largest difference %.3g", what, worst)
}

// TestDataParallelMatchesOneRank: training on 1, 2 and 3 in-process ranks
// (with and without gradient accumulation, several buckets) gives the
// parameters one rank alone reaches with the whole global batch, within
// dpTol; every rank holds the same bits at the start of every step and at
// the end; only rank 0 writes the output directory; and a group of one
// rank makes no collective call and matches the lone run bit for bit.
func TestDataParallelMatchesOneRank(t *testing.T) {
	seed := testseed.Seed(t)
	const steps = 10
	for _, accum := range []int{1, 2} {
		cfg := dpConfig(t.TempDir(), steps)
		cfg.GradAccum = accum
		alone, errs, _ := runRanks(t, seed, 0, cfg, 0, nil)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		want := snapshot(alone[0].m.params())
		wantLoss := trainLosses(t, cfg.Out, 1)
		for ranks := 1; ranks <= 3; ranks++ {
			cfg := cfg
			cfg.Out = t.TempDir()
			counts := make([]*countingCollective, ranks)
			tasks, errs, _ := runRanks(t, seed, ranks, cfg, time.Minute, func(r int, _ *dpTask, h *Hooks) {
				counts[r] = &countingCollective{Collective: h.Collective}
				h.Collective, h.BucketBytes = counts[r], 100 // several buckets
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			got := snapshot(tasks[0].m.params())
			if ranks == 1 {
				assertSameBits(t, "one rank in a group vs alone", got, want)
				if counts[0].calls != 0 {
					t.Fatalf("a group of one rank made %d collective calls", counts[0].calls)
				}
			}
			assertClose(t, "params", got, want)
			for r, task := range tasks {
				if len(task.snaps) != steps*accum/accum || r > 0 && len(task.snaps) != len(tasks[0].snaps) {
					t.Fatalf("rank %d recorded %d step starts", r, len(task.snaps))
				}
				for s := range task.snaps {
					assertSameBits(t, "rank vs rank 0 at a step start", task.snaps[s], tasks[0].snaps[s])
				}
				assertSameBits(t, "rank vs rank 0 at the end", snapshot(task.m.params()), got)
			}
			if ranks > 1 {
				nb := len(PlanBuckets([]int{48, 12, 12, 1}, 4, 100))
				if wantCalls := steps * (nb + 1); counts[1].calls != wantCalls {
					t.Errorf("%d ranks: %d collective calls, want %d (%d buckets and the metrics, per step)", ranks, counts[1].calls, wantCalls, nb)
				}
			}
			loss := trainLosses(t, cfg.Out, max(ranks, 1))
			if len(loss) != steps {
				t.Fatalf("%d ranks: %d train records, want %d (rank 0 alone writes)", ranks, len(loss), steps)
			}
			for s := range loss {
				if math.Abs(loss[s]-wantLoss[s]) > dpTol*(1+wantLoss[s]) {
					t.Errorf("%d ranks, step %d: loss %v, one rank %v", ranks, s+1, loss[s], wantLoss[s])
				}
			}
			if ents, _ := os.ReadDir(cfg.Out); len(ents) == 0 {
				t.Fatalf("%d ranks: nothing written", ranks)
			}
		}
	}
}

// TestDataParallelBuckets: ranks that reduce their gradients in buckets of
// 64 bytes (a parameter or a few each) train bit-identically to ranks that
// reduce them in one bucket.
func TestDataParallelBuckets(t *testing.T) {
	seed := testseed.Seed(t)
	cfg := dpConfig(t.TempDir(), 8)
	whole, errs, _ := runRanks(t, seed, 2, cfg, time.Minute, nil)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	cfg.Out = t.TempDir()
	small, errs, _ := runRanks(t, seed, 2, cfg, time.Minute, func(_ int, _ *dpTask, h *Hooks) { h.BucketBytes = 64 })
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		assertSameBits(t, "64-byte buckets vs one bucket", snapshot(small[r].m.params()), snapshot(whole[r].m.params()))
	}
}

// countingCollective counts the calls made through it.
type countingCollective struct {
	Collective
	calls int
}

func (c *countingCollective) AllReduceSum(x Buffer) error {
	c.calls++
	return c.Collective.AllReduceSum(x)
}

func (c *countingCollective) AllReduceFloat64(x []float64) error {
	c.calls++
	return c.Collective.AllReduceFloat64(x)
}

// TestDataParallelResumeOtherRanks: a checkpoint written by 2 ranks
// resumes on 1 and on 3 ranks (the same global batch) and continues the
// same run: the same data, the parameters and the losses of the 2-rank run
// that went straight through, within dpTol.
func TestDataParallelResumeOtherRanks(t *testing.T) {
	seed := testseed.Seed(t)
	const steps, stop = 10, 5
	cfg := dpConfig(t.TempDir(), steps)
	tasks, errs, _ := runRanks(t, seed, 2, cfg, time.Minute, nil)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	want, wantLoss := snapshot(tasks[0].m.params()), trainLosses(t, cfg.Out, 2)

	half := dpConfig(t.TempDir(), steps)
	half.StopAt = stop
	if _, errs, _ := runRanks(t, seed, 2, half, time.Minute, nil); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	for _, ranks := range []int{1, 3} {
		cfg := half
		cfg.Out, cfg.StopAt, cfg.Resume = t.TempDir(), 0, true
		if err := os.CopyFS(cfg.Out, os.DirFS(half.Out)); err != nil {
			t.Fatal(err)
		}
		tasks, errs, _ := runRanks(t, seed, ranks, cfg, time.Minute, nil)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		assertClose(t, "params after resuming on another rank count", snapshot(tasks[0].m.params()), want)
		loss := trainLosses(t, cfg.Out, 0) // steps of 2 ranks, then of ranks
		if len(loss) != steps {
			t.Fatalf("resumed on %d ranks: %d train records, want %d", ranks, len(loss), steps)
		}
		for s := stop; s < steps; s++ {
			if math.Abs(loss[s]-wantLoss[s]) > dpTol*(1+wantLoss[s]) {
				t.Errorf("resumed on %d ranks, step %d: loss %v, straight %v", ranks, s+1, loss[s], wantLoss[s])
			}
		}
	}
}

// TestDataParallelLostRank: a rank whose step fails (it returns, never to
// call again) or hangs (past the timeout) makes every other rank's Run
// fail within the collective timeout, with an error that names it.
func TestDataParallelLostRank(t *testing.T) {
	seed := testseed.Seed(t)
	const timeout = 200 * time.Millisecond
	for _, how := range []string{"fails", "hangs"} {
		cfg := dpConfig(t.TempDir(), 10)
		var failedAt time.Duration // when rank 2 stopped taking part, from the start
		start := time.Now()
		_, errs, took := runRanks(t, seed, 3, cfg, timeout, func(r int, task *dpTask, h *Hooks) {
			if r != 2 {
				return
			}
			task.fail = func(s StepInfo) error {
				if s.Step < 3 {
					return nil
				}
				failedAt = time.Since(start)
				if how == "hangs" {
					time.Sleep(timeout + 2*time.Second)
				}
				return errors.New("simulated failure")
			}
		})
		for r := range 2 {
			err := errs[r]
			var lost *RankLostError
			if !errors.As(err, &lost) || !slices.Equal(lost.Ranks, []int{2}) || !strings.Contains(err.Error(), "step 4") {
				t.Fatalf("rank 2 %s: rank %d: %v, want a step 4 error naming rank 2", how, r, err)
			}
			t.Logf("rank 2 %s: rank %d: %v", how, r, err)
			// It waited the timeout in its collective, and not much longer
			// than that after rank 2 stopped.
			if took[r] < timeout || took[r] > failedAt+timeout+time.Second {
				t.Errorf("rank 2 %s at %s: rank %d failed at %s, timeout %s", how, failedAt, r, took[r], timeout)
			}
		}
		if errs[2] == nil || !strings.Contains(errs[2].Error(), "simulated failure") {
			t.Errorf("rank 2 %s: its own error %v", how, errs[2])
		}
	}
}

// TestPlanBuckets checks the bucket plan against its definition on random
// parameter sizes: buckets tile [0, total) from the end backwards, each is
// whole parameters, each but the last holds at least the bucket size and
// would hold less without its first (lowest) parameter.
func TestPlanBuckets(t *testing.T) {
	rng := testseed.New(t)
	for trial := range 200 {
		sizes := make([]int, 1+rng.IntN(12))
		for i := range sizes {
			sizes[i] = rng.IntN(50) // some empty parameters
		}
		bucket := int64(1 + rng.IntN(300))
		got := PlanBuckets(sizes, 4, bucket)
		starts := map[int]bool{0: true} // parameter boundaries
		var offs []int
		total := 0
		for _, n := range sizes {
			offs = append(offs, total)
			total += n
			starts[total] = true
		}
		hi := total
		for i, b := range got {
			if b.Hi != hi || b.Lo >= b.Hi || !starts[b.Lo] {
				t.Fatalf("trial %d sizes %v bucket %d: bucket %d is %v after %d", trial, sizes, bucket, i, b, hi)
			}
			bytes := int64(b.Hi-b.Lo) * 4
			if i < len(got)-1 && bytes < bucket {
				t.Fatalf("trial %d sizes %v bucket %d: bucket %d %v holds %d bytes", trial, sizes, bucket, i, b, bytes)
			}
			// Without its lowest non-empty parameter it would be too small.
			for p, off := range offs {
				if off == b.Lo && sizes[p] > 0 && i < len(got)-1 && int64(b.Hi-b.Lo-sizes[p])*4 >= bucket {
					t.Fatalf("trial %d sizes %v bucket %d: bucket %d %v is full without parameter %d", trial, sizes, bucket, i, b, p)
				}
			}
			hi = b.Lo
		}
		if hi != 0 {
			t.Fatalf("trial %d sizes %v bucket %d: buckets %v stop at %d", trial, sizes, bucket, got, hi)
		}
	}
	// A worked case: parameters of 10, 20, 30, 40 floats, buckets of 200 bytes.
	if got, want := PlanBuckets([]int{10, 20, 30, 40}, 4, 200), []Bucket{{30, 100}, {0, 30}}; !slices.Equal(got, want) {
		t.Fatalf("PlanBuckets([10 20 30 40], 4, 200) = %v, want %v", got, want)
	}
}
