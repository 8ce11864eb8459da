package dflash

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/flex"
	"dflash/internal/testseed"
	"dflash/tensor"
)

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
