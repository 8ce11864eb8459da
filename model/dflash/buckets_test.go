package dflash

import (
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// bucketSession returns a session over n random examples of 10 to 600
// tokens, the first 599 (buckets of 128 up to 640), on a small random target, with the
// given number of buckets.
func bucketSession(t *testing.T, seed uint64, n, buckets int) *Session {
	t.Helper()
	m := tinyTarget(t, seed, 1024)
	rng := rand.New(rand.NewPCG(seed, 1))
	ex := randomExamples(rng, n, func(i int) int {
		l := 10 + rng.IntN(590)
		if i == 0 {
			l = 599 // the longest bucket is always 640
		}
		return l
	}, false)
	backend := tensor.NewCPU[float32](2)
	c := DrafterConfigFor(m, 1, []int{1, 2}, 4, 59)
	c.NumAnchors = 200 // more than a 128-token row has candidates: buckets of 128 get 127 blocks
	return &Session{Drafter: New[float32](c, rand.New(rand.NewPCG(seed, 2))), Head: HeadOf(m),
		Hidden: TargetHidden(m, c.TargetLayerIDs, backend), Backend: backend, Train: ex, Eval: ex[:2],
		BatchSize: 3, Seed: seed, Buckets: buckets}
}

// inputShapes lists every shape a step's inputs have.
func inputShapes(in *StepInputs[float32]) []int {
	d := in.Mask.MaskDims()
	sh := []int{in.Batch.Rows, in.Batch.Len, len(in.Batch.IDs), len(in.Batch.SeqLen), in.Blocks.Rows, in.Blocks.N,
		len(in.Blocks.IDs), len(in.Blocks.Anchors), in.IDs.Len(), in.QRope.Cos.Len(), in.CtxRope.Cos.Len(),
		d.Batch, d.LenQ, d.LenKV, in.Loss.N, len(in.Loss.Active), in.Loss.DevTargets.Len(), in.Loss.Scale.Len()}
	for _, x := range in.Taps {
		sh = append(sh, x.Shape...)
	}
	return sh
}

// TestBucketShapes: with buckets every step of a bucket has the same input
// shapes (rows, padded length, anchor blocks, every StepInputs tensor, the
// loss rows whatever the labels), a
// bucket's rows are BatchSize and its blocks min(NumAnchors, length−1),
// and empty pad rows have no anchors and no labels.
func TestBucketShapes(t *testing.T) {
	s := bucketSession(t, testseed.Seed(t), 20, 2)
	sp, err := s.trainSampler()
	if err != nil {
		t.Fatal(err)
	}
	lens := sp.Lens()
	if len(lens) != 2 || lens[1] != 640 {
		t.Fatalf("bucket lengths %v, want 2 ending at 640", lens)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	shapes := map[int][]int{}
	steps := map[int]int{}
	padRows, samples := 0, 0
	for range 3 * sp.BatchesPerEpoch() {
		in, err := s.nextTrain(rng)
		if err != nil {
			t.Fatal(err)
		}
		b, bl := in.Batch, in.Blocks
		if b.Rows != s.BatchSize || !slices.Contains(lens, b.Len) || bl.N != min(200, b.Len-1) {
			t.Fatalf("batch %d rows x %d with %d blocks; buckets %v", b.Rows, b.Len, bl.N, lens)
		}
		sh := inputShapes(in)
		if prev, ok := shapes[b.Len]; ok && !slices.Equal(prev, sh) {
			t.Fatalf("bucket %d: shapes %v, then %v", b.Len, prev, sh)
		}
		shapes[b.Len] = sh
		steps[b.Len]++
		samples += b.Samples()
		for r := range b.Rows {
			if b.SeqLen[r] > 0 {
				continue
			}
			padRows++
			if bl.NumValid[r] != 0 || slices.ContainsFunc(bl.Labels[r*bl.N*bl.B:(r+1)*bl.N*bl.B], func(l int32) bool { return l >= 0 }) {
				t.Fatalf("empty row %d has %d anchors or labels", r, bl.NumValid[r])
			}
		}
	}
	for _, l := range lens {
		if steps[l] < 2 {
			t.Fatalf("bucket %d ran %d steps, want 2 or more to compare", l, steps[l])
		}
	}
	if padRows == 0 {
		t.Fatal("no batch had an empty pad row: the test did not reach them")
	}
	if samples != 3*len(s.Train) {
		t.Errorf("3 epochs counted %d samples, want %d (pad rows are not samples)", samples, 3*len(s.Train))
	}
	if got := s.BucketSteps(); !maps.Equal(got, steps) {
		t.Errorf("BucketSteps %v, want %v", got, steps)
	}
}

// TestFixedShapeChangesNothing: a step padded to a bucket's shape (longer
// rows, empty pad rows, dead anchor blocks) has the loss and gradients of
// the same examples batched at their own shape, to float32 rounding.
func TestFixedShapeChangesNothing(t *testing.T) {
	seed := testseed.Seed(t)
	s := bucketSession(t, seed, 6, 0)
	s.Drafter.Cfg.NumAnchors = 20
	idx := []int{4, 1}
	L := 0
	for _, i := range idx {
		L = max(L, len(s.Train[i].IDs))
	}
	run := func(sh shape) (float32, [][]float32) {
		for _, p := range s.Drafter.Params() {
			p.ZeroGrad()
		}
		in, err := s.inputs(s.Train, singles(idx), false, sh, s.Drafter.Cfg.NumAnchors, rand.New(rand.NewPCG(seed, 9)))
		if err != nil {
			t.Fatal(err)
		}
		tp := tensor.NewTape(s.Backend)
		out := s.Drafter.ForwardInputs(tp, true, s.Head, in)
		tp.Backward(out.Loss)
		var grads [][]float32
		for _, p := range s.Drafter.Params() {
			grads = append(grads, slices.Clone(p.Grad()))
		}
		return out.Loss.Data()[0], grads
	}
	l0, g0 := run(shape{})
	l1, g1 := run(shape{rows: 4, len: L + 70, blocks: 37})
	if l0 == 0 || math.Abs(float64(l1-l0)) > 1e-5*math.Abs(float64(l0)) {
		t.Fatalf("loss %v at the batch's shape, %v padded", l0, l1)
	}
	for i := range g0 {
		for j := range g0[i] {
			if d := math.Abs(float64(g1[i][j] - g0[i][j])); d > 1e-5+1e-4*math.Abs(float64(g0[i][j])) || math.IsNaN(float64(g1[i][j])) {
				t.Fatalf("param %d grad %d: %v at the batch's shape, %v padded", i, j, g0[i][j], g1[i][j])
			}
		}
	}
}

// TestBucketDataPosition: the data position of a bucketed session restores
// the same batches, and positions do not cross between bucketed and
// unbucketed sessions.
func TestBucketDataPosition(t *testing.T) {
	seed := testseed.Seed(t)
	a := bucketSession(t, seed, 20, 3)
	rng := rand.New(rand.NewPCG(1, 1))
	for range 5 {
		if _, err := a.nextTrain(rng); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := a.DataState()
	if err != nil {
		t.Fatal(err)
	}
	b := bucketSession(t, seed, 20, 3)
	if err := b.RestoreData(raw); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		x, y := a.sampler.Next(), b.sampler.Next()
		if !slices.Equal(x.Indices, y.Indices) || x.Len != y.Len || x.Rows != y.Rows {
			t.Fatalf("batch %d after restore: %+v, want %+v", i, y, x)
		}
	}
	plain := bucketSession(t, seed, 20, 0)
	if err := plain.RestoreData(raw); err == nil || !strings.Contains(err.Error(), "this run has no buckets") {
		t.Fatalf("bucketed position into a session without buckets: %v", err)
	}
	praw, _ := plain.DataState()
	if err := b.RestoreData(praw); err == nil || !strings.Contains(err.Error(), "without length buckets") {
		t.Fatalf("unbucketed position into a session with buckets: %v", err)
	}
	other := bucketSession(t, seed, 20, 2)
	if err := other.RestoreData(raw); err == nil || !strings.Contains(err.Error(), "buckets") {
		t.Fatalf("position of 3 buckets into 2: %v", err)
	}
	var st map[string]any
	if json.Unmarshal(raw, &st) != nil || st["buckets"] == nil {
		t.Fatalf("data position %s lacks its buckets", raw)
	}
}
