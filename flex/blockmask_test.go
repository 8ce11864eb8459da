package flex

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// checkBlockMask compares every block of bm with the dense evaluation of
// the reference interpreter: no empty block may hold an allowed pair and no
// full block a masked one; with exact set, partial blocks must be mixed.
// It also checks the transposed lists against the kv-side lists.
func checkBlockMask(t *testing.T, c testCase, bm *BlockMask, exact bool) {
	t.Helper()
	d := c.d
	for b := 0; b < d.Batch; b++ {
		for h := 0; h < d.HeadsQ; h++ {
			for qb := 0; qb < bm.NumQBlocks; qb++ {
				part, full := bm.KVBlocks(b, h, qb)
				kind := make([]int, bm.NumKVBlocks) // 0 empty, 1 partial, 2 full
				for _, x := range part {
					kind[x] = 1
				}
				for _, x := range full {
					if kind[x] != 0 {
						t.Fatalf("%v: block (%d,%d,%d,%d) listed twice", c, b, h, qb, x)
					}
					kind[x] = 2
				}
				for kvb := 0; kvb < bm.NumKVBlocks; kvb++ {
					allowed, masked := 0, 0
					for q := qb * bm.BlockQ; q < min((qb+1)*bm.BlockQ, d.LenQ); q++ {
						for kv := kvb * bm.BlockKV; kv < min((kvb+1)*bm.BlockKV, d.LenKV); kv++ {
							if refMask(c.mask, c.args, b, h, q, kv) {
								allowed++
							} else {
								masked++
							}
						}
					}
					switch {
					case kind[kvb] == 0 && allowed > 0:
						t.Fatalf("%v\nblock (b%d,h%d,q%d,kv%d) classified empty but has %d allowed pairs", c, b, h, qb, kvb, allowed)
					case kind[kvb] == 2 && masked > 0:
						t.Fatalf("%v\nblock (b%d,h%d,q%d,kv%d) classified full but has %d masked pairs", c, b, h, qb, kvb, masked)
					case exact && kind[kvb] == 1 && (allowed == 0 || masked == 0):
						t.Fatalf("%v\nblock (b%d,h%d,q%d,kv%d) partial under exact classification, allowed %d masked %d", c, b, h, qb, kvb, allowed, masked)
					}
					qpart, qfull := bm.QBlocks(b, h, kvb)
					in := func(l []int32, x int) bool {
						for _, y := range l {
							if int(y) == x {
								return true
							}
						}
						return false
					}
					if in(qpart, qb) != (kind[kvb] == 1) || in(qfull, qb) != (kind[kvb] == 2) {
						t.Fatalf("%v: transposed lists disagree at (b%d,h%d,q%d,kv%d)", c, b, h, qb, kvb)
					}
				}
			}
		}
	}
}

func blockMaskCase(t *testing.T, r *rand.Rand) {
	c := randCase(r, 90)
	if c.bq == 1 || c.bkv == 1 {
		c.bq, c.bkv = c.bq+4, c.bkv+6
	}
	for _, mode := range []struct {
		name  string
		opts  []BlockMaskOption
		exact bool
	}{{"interval", []BlockMaskOption{NoRefine()}, false}, {"refined", nil, true}, {"exact", []BlockMaskOption{Exact()}, true}} {
		bm, err := NewBlockMask(c.mask, c.args, c.d, c.bq, c.bkv, mode.opts...)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		checkBlockMask(t, c, bm, mode.exact)
	}
}

// TestBlockMaskSound fuzzes block-mask classification with random
// programs, shapes, block sizes and tensors against dense evaluation.
func TestBlockMaskSound(t *testing.T) {
	r := newRand(t)
	n := trials(300, 60)
	for i := 0; i < n; i++ {
		blockMaskCase(t, r)
	}
}

// FuzzBlockMask is the same check driven by the fuzzer's seeds:
// go test -fuzz FuzzBlockMask ./flex.
func FuzzBlockMask(f *testing.F) {
	for _, s := range []uint64{1, 2, 3, 42, 1 << 40} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		blockMaskCase(t, rand.New(rand.NewPCG(seed, ^seed)))
	})
}

// TestDFlashPackedBlockMask checks the block mask of the DFlash mask over
// context rows packed with several conversations (block starts the
// conversations' starts, some dead blocks) against the dense evaluation,
// pair by pair, with interval, refined and exact classification, at draft
// and attention block sizes small enough for a block to straddle
// conversations and the training ones.
func TestDFlashPackedBlockMask(t *testing.T) {
	r := newRand(t)
	n := trials(24, 8)
	for i := 0; i < n; i++ {
		bs, bq, bkv := []int{4, 16}[i%2], []int{8, 32, 128}[i%3], []int{16, 64}[i%2]
		batch, nb, ctx, convs := 1+r.IntN(2), 1+r.IntN(24), 2+r.IntN(300), 2+r.IntN(4)
		d := DFlashDims(batch, 2, 1, nb, bs, ctx, 4)
		anchors, starts := randPackedDFlash(r, batch, nb, ctx, convs)
		valid := make([]int32, batch)
		for b := range valid {
			valid[b] = int32(nb - r.IntN(min(nb, 4)+1)) // up to 4 dead blocks
		}
		c := testCase{name: fmt.Sprintf("dflash%d packed %d conversations, starts %v", bs, convs, starts), d: d,
			mask: DFlashMask(bs), args: DFlashArgs(ctx, anchors, starts, nb, valid), bq: bq, bkv: bkv}
		for _, mode := range []struct {
			opts  []BlockMaskOption
			exact bool
		}{{[]BlockMaskOption{NoRefine()}, false}, {nil, true}, {[]BlockMaskOption{Exact()}, true}} {
			bm, err := NewBlockMask(c.mask, c.args, d, bq, bkv, mode.opts...)
			if err != nil {
				t.Fatalf("%v: %v", c, err)
			}
			checkBlockMask(t, c, bm, mode.exact)
		}
	}
}

// TestBlockMaskLayout checks shapes, defaults, broadcasting and stats on
// the DFlash mask, and that lengths need not be multiples of the block.
func TestBlockMaskLayout(t *testing.T) {
	d := DFlashDims(2, 4, 2, 10, 16, 300, 8)
	anchors := make([]int32, 20)
	for i := range anchors {
		anchors[i] = int32(i * 29)
	}
	a := DFlashArgs(300, anchors, nil, 10, []int32{10, 7})
	bm, err := NewBlockMask(DFlashMask(16), a, d, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if bm.BlockQ != 128 || bm.BlockKV != 128 || bm.NumQBlocks != 2 || bm.NumKVBlocks != 4 {
		t.Fatalf("blocks %dx%d, counts %d x %d; want 128x128, 2 x 4", bm.BlockQ, bm.BlockKV, bm.NumQBlocks, bm.NumKVBlocks)
	}
	if bm.MaskBatch != 2 || bm.MaskHeads != 1 {
		t.Fatalf("mask batch %d heads %d, want 2 and 1 (the mask reads b, not h)", bm.MaskBatch, bm.MaskHeads)
	}
	st := bm.Stats
	if st.Empty+st.Partial+st.Full != 2*2*4 {
		t.Fatalf("stats %+v do not add up to %d blocks", st, 16)
	}
	checkBlockMask(t, testCase{name: "dflash", d: d, mask: DFlashMask(16), args: a}, bm, true)
	if _, err := NewBlockMask(DFlashMask(16), NewArgs(), d, 0, 0); err == nil {
		t.Fatal("missing args: no error")
	}
	if _, err := NewBlockMask(Causal(), nil, Dims{1, 3, 2, 4, 4, 4, false}, 0, 0); err == nil {
		t.Fatal("HeadsQ not a multiple of HeadsKV: no error")
	}
}

// TestBlockMaskDensity compares Density with the area of the blocks that
// hold at least one allowed pair, counted from a dense evaluation (with
// refinement, a block is non-empty exactly when it holds one).
func TestBlockMaskDensity(t *testing.T) {
	r := newRand(t)
	for i := 0; i < 20; i++ {
		c := randCase(r, 50)
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			bm, err := NewBlockMask(c.mask, c.args, d, c.bq, c.bkv)
			if err != nil {
				t.Fatal(err)
			}
			dm := c.denseMask(t)
			area := 0
			for b := 0; b < bm.MaskBatch; b++ {
				for h := 0; h < bm.MaskHeads; h++ {
					for q0 := 0; q0 < d.LenQ; q0 += bm.BlockQ {
						for k0 := 0; k0 < d.LenKV; k0 += bm.BlockKV {
							q1, k1 := min(q0+bm.BlockQ, d.LenQ), min(k0+bm.BlockKV, d.LenKV)
							allowed := false
							for q := q0; q < q1 && !allowed; q++ {
								for kv := k0; kv < k1 && !allowed; kv++ {
									allowed = dm.At(b, h, q, kv)
								}
							}
							if allowed {
								area += (q1 - q0) * (k1 - k0)
							}
						}
					}
				}
			}
			want := float64(area) / float64(bm.MaskBatch*bm.MaskHeads*d.LenQ*d.LenKV)
			if got := bm.Density(); math.Abs(got-want) > 1e-12 {
				t.Fatalf("%v\nDensity() = %v, want %v", c, got, want)
			}
		})
	}
}

// TestMaskDimsMismatch checks that Forward, Backward, DenseForward and
// DenseBackward panic on a mask built for other dims, and accept one that
// does not read the head with another number of heads.
func TestMaskDimsMismatch(t *testing.T) {
	built := Dims{Batch: 1, HeadsQ: 2, HeadsKV: 1, LenQ: 8, LenKV: 8, HeadDim: 4}
	bm, err := NewBlockMask(Causal(), nil, built, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	dm, err := NewDenseMask(Causal(), nil, built, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := newRand(t)
	run := func(d Dims) (panicked bool) {
		defer func() { panicked = recover() != nil }()
		n, nkv := d.Batch*d.HeadsQ*d.LenQ*d.HeadDim, d.Batch*d.HeadsKV*d.LenKV*d.HeadDim
		q, k, v := randSlice(r, n), randSlice(r, nkv), randSlice(r, nkv)
		out, lse := Forward(d, q, k, v, bm, nil, nil, 1)
		Backward(d, q, k, v, out, lse, q, bm, nil, nil, 1)
		out, lse = DenseForward(d, q, k, v, dm, nil, nil, 1)
		DenseBackward(d, q, k, v, out, lse, q, dm, nil, nil, 1)
		return false
	}
	for _, c := range []struct {
		name  string
		d     Dims
		panic bool
	}{
		{"same", built, false},
		{"more heads", Dims{Batch: 1, HeadsQ: 4, HeadsKV: 2, LenQ: 8, LenKV: 8, HeadDim: 4}, false},
		{"lenq", Dims{Batch: 1, HeadsQ: 2, HeadsKV: 1, LenQ: 9, LenKV: 8, HeadDim: 4}, true},
		{"lenkv", Dims{Batch: 1, HeadsQ: 2, HeadsKV: 1, LenQ: 8, LenKV: 7, HeadDim: 4}, true},
		{"batch", Dims{Batch: 2, HeadsQ: 2, HeadsKV: 1, LenQ: 8, LenKV: 8, HeadDim: 4}, true},
		{"invalid", Dims{Batch: 1, HeadsQ: 3, HeadsKV: 2, LenQ: 8, LenKV: 8, HeadDim: 4}, true},
	} {
		if got := run(c.d); got != c.panic {
			t.Errorf("%s: panicked %v, want %v", c.name, got, c.panic)
		}
	}
}
