package flexcuda

import (
	"fmt"
	"testing"

	"dflash/flex"
)

// dflashClass is a line-by-line Go transcription of flex_dflash_class in
// kernels/flex_blockmask.cu, so that its closed form can be checked against
// flex.NewBlockMask on the CPU (the GPU test checks the kernel itself).
func dflashClass(bs int, anchors []int32, ad0, ad1 int, starts []int32, sd0, sd1 int, valid []int32, vd0, ctx, lenq, lenkv, bq, bkv, b, qb, kvb int) int {
	clamp := func(i, n int) int { return max(0, min(i, n-1)) }
	q0, q1 := qb*bq, min(qb*bq+bq, lenq)
	k0, k1 := kvb*bkv, min(kvb*bkv+bkv, lenkv)
	j0, j1 := q0/bs, (q1-1)/bs
	nv := int(valid[clamp(b, vd0)])
	jv1 := min(j1, nv-1)
	if jv1 < j0 {
		return 0
	}
	kc1 := min(k1, ctx)
	hasC := k0 < kc1
	anyC, allC := false, true
	if hasC {
		arow := anchors[clamp(b, ad0)*ad1:]
		srow := starts[clamp(b, sd0)*sd1:]
		for j := j0; j <= jv1; j++ {
			a := int(arow[clamp(j, ad1)])
			st := int(srow[clamp(j, sd1)])
			anyC = anyC || max(k0, st) < min(kc1, a)
			allC = allC && st <= k0 && kc1 <= a
		}
	}
	kd0 := max(k0, ctx)
	hasD := kd0 < k1
	pd0, pd1 := kd0-ctx, k1-ctx
	anyD := hasD && max(bs*j0, pd0) < min(bs*(jv1+1), pd1)
	if !anyC && !anyD {
		return 0
	}
	allD := !hasD || (j0 == j1 && pd0/bs == j0 && (pd1-1)/bs == j0)
	if j1 < nv && allC && allD {
		return 2
	}
	return 1
}

// TestDFlashClosedFormMatchesCPU checks the closed-form DFlash block
// classification against flex.NewBlockMask (interval evaluation refined per
// element) on random anchors, block starts (rows packed with up to 4
// conversations, some starts arbitrary), padding, context lengths and block
// sizes.
func TestDFlashClosedFormMatchesCPU(t *testing.T) {
	r := newRand(t)
	n := 300
	if testing.Short() {
		n = 60
	}
	var seen [3]int
	defer func() { t.Logf("classes seen: empty %d, partial %d, full %d", seen[0], seen[1], seen[2]) }()
	for it := 0; it < n; it++ {
		bs := []int{16, 8, 10, 1}[it%4]
		bq := []int{64, 128, 32}[it%3]
		bkv := []int{128, 64}[it%2]
		batch, nb, ctx := 1+r.IntN(3), 1+r.IntN(30), 1+r.IntN(500)
		hargs := dflashHostArgs(r, batch, nb, ctx, it%2 == 0, r.IntN(5))
		dims := flex.DFlashDims(batch, 2, 1, nb, bs, ctx, 64)
		bm, err := flex.NewBlockMask(flex.DFlashMask(bs), hargs, dims, bq, bkv)
		if err != nil {
			t.Fatal(err)
		}
		an, st, nv := hargs.IntTensors[flex.DFlashAnchors], hargs.IntTensors[flex.DFlashStarts], hargs.IntTensors[flex.DFlashNumValid]
		for b := 0; b < batch; b++ {
			for qb := 0; qb < bm.NumQBlocks; qb++ {
				part, full := bm.KVBlocks(b, 0, qb)
				want := make([]int, bm.NumKVBlocks)
				for _, k := range part {
					want[k] = 1
				}
				for _, k := range full {
					want[k] = 2
				}
				for kvb := range want {
					got := dflashClass(bs, an.Data, an.Shape[0], an.Shape[1], st.Data, st.Shape[0], st.Shape[1], nv.Data, nv.Shape[0],
						ctx, dims.LenQ, dims.LenKV, bq, bkv, b, qb, kvb)
					seen[got]++
					if got != want[kvb] {
						t.Fatalf("block size %d, blocks %dx%d, dims %+v, b %d qb %d kvb %d: class %d, CPU block mask says %d (anchors %v, starts %v, num_valid %v)",
							bs, bq, bkv, dims, b, qb, kvb, got, want[kvb], fmt.Sprint(an.Data[b*nb:(b+1)*nb]), fmt.Sprint(st.Data[b*nb:(b+1)*nb]), nv.Data)
					}
				}
			}
		}
	}
}
