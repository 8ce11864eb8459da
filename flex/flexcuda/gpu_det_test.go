package flexcuda

import (
	"math/rand/v2"
	"strings"
	"testing"

	"dflash/dtype"
	"dflash/flex"
)

// detCases are the deterministic backward's GPU cases: GQA on the DFlash
// mask (with padding rows, per-head slices; unsorted anchors with the
// portable forward) and the causal mask, G1 with q block 64 (the
// 4-warp dQ pass), Lq != Lkv in fp16, head dim 256 and a score program
// without tensors.
func detCases() []attnCase {
	det := func(c Config) Config { c.Deterministic = true; return c }
	return []attnCase{
		{"det/dflash16/g4/padding/d128/bf16", flex.DFlashMask(16), nil, det(Config{HeadDim: 128, Group: 4}),
			func(r *rand.Rand) flex.Dims { return flex.DFlashDims(2, 8, 2, 14+r.IntN(10), 16, 200+r.IntN(200), 128) },
			func(r *rand.Rand, d flex.Dims) *flex.Args {
				return dflashHostArgs(r, d.Batch, d.LenQ/16, d.LenKV-d.LenQ, true, 0)
			}},
		{"det/dflash16/g4/unsorted/portable-fwd/d128/bf16", flex.DFlashMask(16), nil, det(Config{HeadDim: 128, Group: 4, Fwd: Portable}),
			func(r *rand.Rand) flex.Dims { return flex.DFlashDims(1, 8, 2, 10+r.IntN(10), 16, 150+r.IntN(200), 128) },
			func(r *rand.Rand, d flex.Dims) *flex.Args {
				return dflashHostArgs(r, d.Batch, d.LenQ/16, d.LenKV-d.LenQ, false, 0)
			}},
		{"det/causal/g2/d128/bf16", flex.Causal(), nil, det(Config{HeadDim: 128, Group: 2}), square(2, 4, 2, 200, 420, 128), noArgs},
		{"det/causal/g4/lq!=lkv/d64/fp16", flex.Causal(), nil, det(Config{HeadDim: 64, Group: 4, DType: dtype.F16}),
			func(r *rand.Rand) flex.Dims {
				return flex.Dims{Batch: 1, HeadsQ: 4, HeadsKV: 1, LenQ: 450 + r.IntN(100), LenKV: 600 + r.IntN(150), HeadDim: 64}
			}, noArgs},
		{"det/document/d128/bf16/bq64", flex.Document(true), nil, det(Config{HeadDim: 128, BlockQ: 64}), square(2, 4, 4, 500, 700, 128), docArgs},
		{"det/window77/g4/d256/bf16", flex.SlidingWindow(77), nil, det(Config{HeadDim: 256, Group: 4}), square(1, 8, 2, 300, 450, 256), noArgs},
		{"det/causal+softcap/g2/d64/bf16", flex.Causal(), flex.SoftcapScalar(), det(Config{HeadDim: 64, Group: 2}), square(1, 4, 2, 250, 400, 64),
			func(r *rand.Rand, d flex.Dims) *flex.Args {
				return flex.NewArgs().SetFloat(flex.SoftcapName, 0.3+0.4*r.Float64())
			}},
	}
}

// TestGPUDeterministicBackward checks the deterministic backward against
// the CPU float64 reference with the bounds of TestGPUAttention, and that
// two backward calls on the same inputs give bit-identical dQ, dK and dV.
func TestGPUDeterministicBackward(t *testing.T) {
	runGPUCases(t, detCases(), func(t *testing.T, res *attnResult) {
		for k, n := range res.repeatDiff {
			if n != 0 {
				t.Errorf("%s: %d elements differ bitwise between two runs of the deterministic backward", k, n)
			}
		}
	})
}

// TestDeterministicRefusesTensorGrads: score programs whose float tensors
// have gradients (summed with atomics) are refused with a message naming
// the tensor.
func TestDeterministicRefusesTensorGrads(t *testing.T) {
	_, err := New(nil, flex.Document(false), flex.RelativeBias(8), Config{HeadDim: 128, Deterministic: true})
	if err == nil || !strings.Contains(err.Error(), flex.RelBiasName) {
		t.Fatalf("err = %v, want a refusal naming %q", err, flex.RelBiasName)
	}
	if _, err := New(nil, flex.Causal(), flex.SoftcapScalar(), Config{HeadDim: 64, Deterministic: true}); err != nil {
		t.Fatalf("softcap (no tensors): %v", err)
	}
}
