package dflash

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"dflash/flex"
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
		in, err := s.inputs(s.Train, singles(idx), training, sh, s.Drafter.Cfg.NumAnchors, rand.New(rand.NewPCG(seed, 9)))
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

// packFixture returns n examples of 9 to 30 tokens (about 80% labelled
// after the first few) over testConfig's vocabulary, with each example's
// hidden states at the taps ([len, H] per tap), and a packing of them into
// rows of L tokens (first-fit in order).
func packFixture(rng *rand.Rand, n, L int) (ex []Example, hidden [][][]float32, pick [][]int) {
	c := testConfig()
	free := []int{}
	for i := range n {
		l := 9 + rng.IntN(22)
		e := Example{IDs: make([]int32, l), Mask: make([]uint8, l)}
		for j := range l {
			e.IDs[j] = int32(rng.IntN(c.VocabSize - 1))
			if j >= 3 && rng.IntN(5) > 0 {
				e.Mask[j] = 1
			}
		}
		ex = append(ex, e)
		h := make([][]float32, len(c.TargetLayerIDs))
		for t := range h {
			h[t] = make([]float32, l*c.HiddenSize)
			for k := range h[t] {
				h[t][k] = float32(rng.NormFloat64())
			}
		}
		hidden = append(hidden, h)
		r := slices.IndexFunc(free, func(f int) bool { return f >= l })
		if r < 0 {
			r, free, pick = len(free), append(free, L), append(pick, nil)
		}
		pick[r] = append(pick[r], i)
		free[r] -= l
	}
	return ex, hidden, pick
}

// withTaps sets b's taps from each sample's hidden states.
func withTaps(b *Batch, hidden [][][]float32, H int) {
	taps := make([][]float32, len(hidden[0]))
	for t := range taps {
		taps[t] = make([]float32, b.Rows*b.Len*H)
	}
	for r := range b.Rows {
		for _, sg := range b.RowSegs(r) {
			for t, h := range hidden[sg.Example] {
				copy(taps[t][(r*b.Len+sg.Start)*H:], h)
			}
		}
	}
	b.Taps = nil
	for t, h := range taps {
		b.Taps = append(b.Taps, tensor.FromData(fmt.Sprintf("tap%d", t), h, b.Rows*b.Len, H))
	}
}

// TestPackedStepEqualsUnpacked: in float64, a training step over packed
// rows has the loss and the gradients of the same examples a row each: the
// same anchors per example (ExampleAnchors), attention inside each sample,
// positions from each sample's start.
func TestPackedStepEqualsUnpacked(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	d, head, _, _ := randomDrafter[float64](rng, 8, []int{8}, 1)
	c := d.Cfg
	ex, hidden, pick := packFixture(rng, 9, 64)
	if len(pick) >= len(ex) {
		t.Fatalf("%d examples in %d rows: nothing packed", len(ex), len(pick))
	}
	var idx []int
	L := 0
	for i := range ex {
		idx = append(idx, i)
		L = max(L, len(ex[i].IDs))
	}
	step := func(b *Batch, blocks int) (float64, [][]float64) {
		withTaps(b, hidden, c.HiddenSize)
		anchors := ExampleAnchors(seed, b, c.NumAnchors, blocks)
		var bl *Blocks
		if blocks > 0 {
			bl = BuildBlocksN(c, b, anchors, blocks)
			bl.Fixed = true
		} else {
			bl = BuildBlocks(c, b, anchors)
		}
		return lossAndGrads(t, 2, d, head, b, bl)
	}
	l0, g0 := step(MakeBatch(ex, idx, 0), 0)
	packed := MakePackedBatch(ex, pick, 0, len(pick)+1, 64) // and an empty row
	l1, g1 := step(packed, 4*c.NumAnchors)
	if l0 == 0 || math.Abs(l1-l0) > 1e-9*math.Abs(l0) {
		t.Fatalf("loss %v a sample a row, %v packed", l0, l1)
	}
	for i := range g0 {
		for j := range g0[i] {
			if d := math.Abs(g1[i][j] - g0[i][j]); d > 1e-9*(1+math.Abs(g0[i][j])) || math.IsNaN(g1[i][j]) {
				t.Fatalf("param %d grad %d: %v a sample a row, %v packed", i, j, g0[i][j], g1[i][j])
			}
		}
	}
}

// TestPackedMasksIsolateSamples evaluates the masks of a packed batch pair
// by pair (flex.NewDenseMask) and checks them against their definition:
// the target's lets a token see exactly the tokens of its own sample at
// or before it, and the drafter's lets a block see exactly the context of
// its own sample before its anchor and its own block; nothing crosses
// between samples.
func TestPackedMasksIsolateSamples(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 12))
	c := testConfig()
	ex, _, pick := packFixture(rng, 12, 80)
	b := MakePackedBatch(ex, pick, 0, len(pick), 80)
	sample := func(r, p int) int { // the sample of row r holding position p, -1 in the padding
		for k, sg := range b.RowSegs(r) {
			if p >= sg.Start && p < sg.End() {
				return k
			}
		}
		return -1
	}
	target, err := flex.NewDenseMask(flex.Document(true), flex.NewArgs().SetIntTensor(flex.DocIDs, b.DocIDs(), b.Rows, b.Len),
		flex.Dims{Batch: b.Rows, HeadsQ: 1, HeadsKV: 1, LenQ: b.Len, LenKV: b.Len, HeadDim: 8}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for r := range b.Rows {
		for q := range b.Len {
			for k := range b.Len {
				want := k <= q && sample(r, q) == sample(r, k) && (sample(r, q) >= 0 || k >= b.SeqLen[r])
				if got := target.OK[(r*b.Len+q)*b.Len+k]; got != want {
					t.Fatalf("target mask row %d query %d key %d: %v, want %v", r, q, k, got, want)
				}
			}
		}
	}
	anchors := ExampleAnchors(seed, b, c.NumAnchors, 24)
	bl := BuildBlocksN(c, b, anchors, 24)
	d := flex.DFlashDims(b.Rows, 1, 1, bl.N, bl.B, b.Len, 8)
	dm, err := flex.NewDenseMask(flex.DFlashMask(bl.B), flex.DFlashArgs(b.Len, bl.Anchors, bl.Starts, bl.N, bl.NumValid), d, 0)
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for r := range b.Rows {
		for j := range bl.N {
			a := int(bl.Anchors[r*bl.N+j])
			for s := range bl.B {
				q := j*bl.B + s
				for k := range d.LenKV {
					var want bool
					switch {
					case j >= int(bl.NumValid[r]):
					case k < b.Len:
						want = k < a && sample(r, k) == sample(r, a)
					default:
						want = (k-b.Len)/bl.B == j
					}
					if got := dm.OK[(r*d.LenQ+q)*d.LenKV+k]; got != want {
						t.Fatalf("drafter mask row %d block %d (anchor %d) key %d: %v, want %v", r, j, a, k, got, want)
					}
				}
			}
			if j < int(bl.NumValid[r]) && sample(r, a) > 0 {
				live++
			}
		}
	}
	if live == 0 {
		t.Fatal("no block of a row's second or later sample: the test saw no packing")
	}
}

// TestPackedTargetEqualsUnpacked: the target's hidden states at the taps
// over packed rows are those of each sample alone.
func TestPackedTargetEqualsUnpacked(t *testing.T) {
	seed := testseed.Seed(t)
	m, ex := tinyTargetData(t, seed, 7, true)
	be := tensor.NewCPU[float32](2)
	hid := TargetHidden(m, []int{0, 2}, be)
	pick := [][]int{{0, 1, 2}, {3, 4}, {5, 6}}
	b := MakePackedBatch(ex, pick, 0, 3, 100)
	if err := hid(b); err != nil {
		t.Fatal(err)
	}
	H := m.Config.HiddenSize
	for r, row := range pick {
		for _, sg := range b.RowSegs(r) {
			alone := MakeBatch(ex, []int{sg.Example}, 0)
			if err := hid(alone); err != nil {
				t.Fatal(err)
			}
			for tap := range b.Taps {
				got := b.Taps[tap].Data()[(r*b.Len+sg.Start)*H : (r*b.Len+sg.End())*H]
				want := alone.Taps[tap].Data()
				for i := range want {
					if math.Abs(float64(got[i]-want[i])) > 1e-5*(1+math.Abs(float64(want[i]))) {
						t.Fatalf("row %v example %d tap %d value %d: %v packed, %v alone", row, sg.Example, tap, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestAnchorShares checks the shares against their definition: all when
// they fit, else the floors of the proportional shares plus one each for
// the largest remainders, summing to the room.
func TestAnchorShares(t *testing.T) {
	for _, c := range []struct {
		want  []int
		room  int
		share []int
	}{
		{[]int{3, 5}, 0, []int{3, 5}},
		{[]int{3, 5}, 8, []int{3, 5}},
		{[]int{10, 30}, 20, []int{5, 15}},
		{[]int{1, 1, 1}, 2, []int{1, 1, 0}},
		{[]int{7, 2, 4}, 6, []int{3, 1, 2}}, // 3.23, 0.92, 1.85: floors 3, 0, 1; remainders to 2 and 1
	} {
		if got := AnchorShares(c.want, c.room); !slices.Equal(got, c.share) {
			t.Errorf("AnchorShares(%v, %d) = %v, want %v", c.want, c.room, got, c.share)
		}
	}
}

// TestTapErrors: against itself every tap errs 0; against states scaled by
// 1+e_t at tap t, ‖h − (1+e_t)h‖/‖(1+e_t)h‖ = e_t/(1+e_t) exactly.
func TestTapErrors(t *testing.T) {
	seed := testseed.Seed(t)
	m, ex := tinyTargetData(t, seed, 5, true)
	be := tensor.NewCPU[float32](2)
	hid := TargetHidden(m, []int{0, 2}, be)
	scales := []float64{0.25, 0.03}
	scaled := func(b *Batch) error {
		if err := hid(b); err != nil {
			return err
		}
		for i, x := range b.Taps {
			v := tensor.New[float32](x.Name, x.Shape...)
			for j, e := range x.Data() {
				v.Data()[j] = float32(float64(e) * (1 + scales[i]))
			}
			b.Taps[i] = v
		}
		return nil
	}
	same, err := TapErrors(be, ex, 0, hid, hid)
	if err != nil {
		t.Fatal(err)
	}
	got, err := TapErrors(be, ex, 0, hid, scaled)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range scales {
		if same[i] != 0 {
			t.Errorf("tap %d against itself: error %v", i, same[i])
		}
		if want := e / (1 + e); math.Abs(got[i]-want) > 1e-6 {
			t.Errorf("tap %d scaled by %v: error %v, want %v", i, 1+e, got[i], want)
		}
	}
}
