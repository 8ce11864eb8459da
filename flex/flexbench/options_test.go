package flexbench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"dflash/dtype"
	"dflash/flex"
	"dflash/internal/testseed"
)

// small is a CPU problem that runs in milliseconds.
func small(mask string) Options {
	return Options{Device: "cpu", Mask: mask, Batch: 2, Heads: 2, KVHeads: 1, HeadDim: 16, Anchors: 5, BlockSize: 4,
		Context: 90, Seq: 200, Window: 40, DocLen: 60, Block: 64, Warmup: -1, Dense: true}
}

func TestOptionsErrors(t *testing.T) {
	for _, c := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Device = "gpu" }, `--device "gpu": unknown device`},
		{func(o *Options) { o.DType = dtype.BF16 }, "--dtype bf16: want f32 or f64 on cpu"},
		{func(o *Options) { o.Device, o.DType = "cuda", dtype.F64 }, "--dtype f64: want bf16 or f16 on cuda"},
		{func(o *Options) { o.Heads, o.KVHeads = 3, 2 }, "--heads 3 is not a multiple of --kv-heads 2"},
		{func(o *Options) { o.DocLen = 0 }, "--doc-len 0: must be >= 1"},
		{func(o *Options) { o.Warmup = -2 }, "--warmup -2"},
		{func(o *Options) { o.Save = "x" }, "are for --device cuda"},
		{func(o *Options) { o.Device, o.Save, o.ForwardOnly = "cuda", "x", true }, "--save writes a forward and backward call"},
		{func(o *Options) { o.Mask = "ring" }, `--mask "ring": unknown mask`},
	} {
		o := small("causal")
		c.edit(&o)
		_, err := Run(o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", o, err, c.want)
		}
	}
	o, err := Options{Device: "cuda", Batch: 1, Heads: 1, KVHeads: 1, HeadDim: 64, Anchors: 1, BlockSize: 1, Context: 2,
		Seq: 1, Window: 1, DocLen: 1, Block: 128, Warmup: -1}.normalized()
	if err != nil || o.DType != dtype.BF16 || o.Reps != 30 || o.RepsFB != 20 || o.Warmup != 5 {
		t.Errorf("cuda defaults: %v %+v", err, o)
	}
}

// TestRunCPU runs every mask on the CPU and checks the report against
// independent counts: the density from a dense evaluation of the mask,
// the block counts, and the sparse result against the dense reference.
func TestRunCPU(t *testing.T) {
	rng := testseed.New(t)
	for _, mask := range []string{"causal", "window", "document", "dflash"} {
		for _, dt := range []dtype.DType{dtype.F32, dtype.F64} {
			t.Run(mask+"/"+dt.String(), func(t *testing.T) {
				o := small(mask)
				o.DType, o.Seed, o.Reps, o.RepsFB = dt, rng.Uint64(), 2, 1
				rep, err := Run(o)
				if err != nil {
					t.Fatal(err)
				}
				pc, err := o.problem(newCaseRand(o.Seed))
				if err != nil {
					t.Fatal(err)
				}
				dm, err := flex.NewDenseMask(pc.mask, pc.args, pc.dims, 1<<30)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(rep.Density-dm.Density()) > 1e-12 {
					t.Errorf("density %v, dense evaluation %v", rep.Density, dm.Density())
				}
				bm := rep.BlockMask
				if bm.Blocks != bm.Partial+bm.Full+bm.Empty || bm.Blocks == 0 || rep.ForwardMS <= 0 || rep.FwdBwdMS <= 0 {
					t.Errorf("report %+v", rep)
				}
				tol := map[dtype.DType]float64{dtype.F32: 1e-4, dtype.F64: 1e-10}[dt]
				if rep.Dense.ForwardMaxDiff > tol || rep.Dense.FwdBwdMaxDiff > tol {
					t.Errorf("sparse vs dense: forward %g, gradients %g (tolerance %g)", rep.Dense.ForwardMaxDiff, rep.Dense.FwdBwdMaxDiff, tol)
				}
				b, err := json.Marshal(rep)
				if err != nil {
					t.Fatal(err)
				}
				for _, key := range []string{`"forward_ms"`, `"forward_backward_ms"`, `"block_mask"`, `"gpu_build_ms"`, `"dtype":"` + dt.String() + `"`} {
					if !strings.Contains(string(b), key) {
						t.Errorf("JSON lacks %s: %s", key, b)
					}
				}
			})
		}
	}
}
