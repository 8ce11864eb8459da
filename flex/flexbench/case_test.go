package flexbench

import (
	"math"
	"math/rand/v2"
	"testing"

	"dflash/flex"
)

// TestAllowedPairs checks the closed-form allowed-pair counts the useful
// TFLOP/s use against a dense evaluation of each mask.
func TestAllowedPairs(t *testing.T) {
	base := Options{Device: "cpu", Batch: 2, Heads: 2, KVHeads: 1, HeadDim: 64, Anchors: 9, BlockSize: 16, Context: 100,
		Seq: 300, Window: 37, DocLen: 70, Block: 128, Reps: 1, RepsFB: 1, BuildReps: 1}
	for _, mask := range []string{"causal", "window", "document", "dflash"} {
		t.Run(mask, func(t *testing.T) {
			o := base
			o.Mask = mask
			pc, err := o.problem(rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			dm, err := flex.NewDenseMask(pc.mask, pc.args, pc.dims, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			d := pc.dims
			want := dm.Density() * float64(d.Batch*d.LenQ*d.LenKV)
			if math.Abs(pc.pairs-want) > 0.5 {
				t.Errorf("closed form %v allowed pairs, dense count %v", pc.pairs, want)
			}
		})
	}
	o := base
	o.Mask, o.Anchors = "dflash", 200
	if _, err := o.problem(rand.New(rand.NewPCG(1, 2))); err == nil {
		t.Error("200 distinct anchors in a context of 100 accepted")
	}
}
