package flex

import (
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
	n := 300
	if raceEnabled || testing.Short() {
		n = 60
	}
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

// TestBlockMaskLayout checks shapes, defaults, broadcasting and stats on
// the DFlash mask, and that lengths need not be multiples of the block.
func TestBlockMaskLayout(t *testing.T) {
	d := DFlashDims(2, 4, 2, 10, 16, 300, 8)
	anchors := make([]int32, 20)
	for i := range anchors {
		anchors[i] = int32(i * 29)
	}
	a := DFlashArgs(300, anchors, 10, []int32{10, 7})
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
	if _, err := NewBlockMask(Causal(), nil, Dims{1, 3, 2, 4, 4, 4}, 0, 0); err == nil {
		t.Fatal("HeadsQ not a multiple of HeadsKV: no error")
	}
}
