package dflash

import (
	"fmt"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestProposeMatchesForward checks inference against the training forward
// pass (itself checked against the PyTorch reference): for every block of a
// random batch, a context extended in two pieces with the hidden states of
// the positions before the anchor and Propose of the anchor token give the
// logits that Forward's last hidden state gives for that block; so does
// ProposeRows of several blocks at once (contexts of different lengths).
func TestProposeMatchesForward(t *testing.T) {
	rng := testseed.New(t)
	d, head, b, bl := randomDrafter[float64](rng, 23, []int{23}, 6)
	cpu := tensor.NewCPU[float64](2)
	out, err := d.Forward(tensor.NewInference[float64](cpu), false, head, b, bl)
	if err != nil {
		t.Fatal(err)
	}
	tp := tensor.NewInference[float64](cpu)
	c := d.Cfg
	want := tp.Linear(tp.RMSNorm(out.Hidden[len(out.Hidden)-1], d.Norm, c.RMSNormEps), head.LMHead, nil)
	H, B, V := c.HiddenSize, c.BlockSize, c.VocabSize
	rows := func(lo, hi int) []*tensor.Of[float64] {
		var hs []*tensor.Of[float64]
		for _, h := range b.Taps {
			x := make([]float64, (hi-lo)*H)
			for i, v := range h.Data()[lo*H : hi*H] {
				x[i] = float64(v)
			}
			hs = append(hs, tensor.FromData("tap", x, hi-lo, H))
		}
		return hs
	}
	var ctxs []*Context[float64]
	var last []int32
	for j := range int(bl.NumValid[0]) {
		a := int(bl.Anchors[j])
		ctx := d.NewContext(cpu, a)
		cut := rng.IntN(a + 1)
		d.Extend(cpu, ctx, rows(0, cut))
		d.Extend(cpu, ctx, rows(cut, a))
		if ctx.Len != a {
			t.Fatalf("context length %d, want %d", ctx.Len, a)
		}
		got := d.Propose(cpu, head, ctx, b.IDs[a])
		backendtest.Close(t, fmt.Sprintf("block at anchor %d", a), got.Data(), want.Data()[j*B*V:(j+1)*B*V], 1e-10)
		ctxs, last = append(ctxs, ctx), append(last, b.IDs[a])
	}
	if len(ctxs) < 3 {
		t.Fatalf("%d blocks: too few to batch", len(ctxs))
	}
	for _, R := range []int{1, 3, len(ctxs)} {
		got := d.ProposeRows(cpu, head, ctxs[:R], last[:R])
		backendtest.Close(t, fmt.Sprintf("%d blocks at once", R), got.Data(), want.Data()[:R*B*V], 1e-10)
	}
}
