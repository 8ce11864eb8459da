package stepbench

import (
	"math/rand/v2"
	"testing"

	"dflash/flex"
	"dflash/internal/testseed"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
	"dflash/train"
)

// tinyTarget is a Qwen3 shape small enough to run a step in milliseconds.
func tinyTarget() model.Config {
	return model.Config{Arch: model.Qwen3, VocabSize: 97, HiddenSize: 32, IntermediateSize: 48, NumLayers: 6,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 8, RMSNormEps: 1e-6, RopeTheta: 1e4, MaxPositionEmbeddings: 256}
}

// tinyOptions is a CPU run of tinyTarget.
func tinyOptions() Options {
	return Options{Device: "cpu", TargetName: "tiny", Target: tinyTarget(), SeqLen: 40, Batch: 2, Anchors: 5, BlockSize: 4,
		DrafterLayers: 2, Steps: 2, Warmup: 1, Seed: 7}
}

// countingBackend is the CPU backend that adds 2·m·n·k for every GEMM it
// runs and records every attention call's dimensions and mask.
type countingBackend struct {
	tensor.Backend[float32]
	gemm  float64
	calls []attnCall
}

type attnCall struct {
	d    flex.Dims
	mask *flex.MaskProgram
	args *flex.Args
}

func (c *countingBackend) Gemm(ta, tb bool, m, n, k int, alpha float32, a tensor.Storage[float32], lda int, b tensor.Storage[float32], ldb int, beta float32, out tensor.Storage[float32], ldc int) {
	c.gemm += 2 * float64(m) * float64(n) * float64(k)
	c.Backend.Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, out, ldc)
}

func (c *countingBackend) GemmAdd(ta, tb bool, m, n, k int, alpha float32, a tensor.Storage[float32], lda int, b tensor.Storage[float32], ldb int, cs, d tensor.Storage[float32], ldc int) {
	c.gemm += 2 * float64(m) * float64(n) * float64(k)
	c.Backend.GemmAdd(ta, tb, m, n, k, alpha, a, lda, b, ldb, cs, d, ldc)
}

func (c *countingBackend) Attention(d flex.Dims, q, k, v tensor.Storage[float32], m tensor.Mask, score *flex.ScoreProgram, scale float64) (out, lse tensor.Storage[float32]) {
	c.calls = append(c.calls, attnCall{d, m.(tensor.HostMask).Mask(), m.MaskArgs()})
	return c.Backend.Attention(d, q, k, v, m, score, scale)
}

// reset returns the GEMM FLOPs and the attention forward FLOPs (4·D per
// allowed pair and query head, the pairs counted on the dense mask) since
// the last reset, and clears them.
func (c *countingBackend) reset(t *testing.T) (gemm, attn float64) {
	t.Helper()
	for _, a := range c.calls {
		dm, err := flex.NewDenseMask(a.mask, a.args, a.d, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ok := range dm.OK {
			if ok {
				n++
			}
		}
		planes := float64(a.d.Batch/dm.MaskBatch) * float64(a.d.HeadsQ/dm.MaskHeads)
		attn += 4 * float64(a.d.HeadDim) * float64(n) * planes
	}
	gemm = c.gemm
	c.gemm, c.calls = 0, nil
	return gemm, attn
}

// TestStepFLOPsMatchesCountedGEMMs runs a real step of a tiny target and
// drafter on a backend that counts every GEMM's 2mnk and every attention
// call's allowed pairs (on the dense mask), and compares with StepFLOPs's
// closed form, phase by phase.
func TestStepFLOPsMatchesCountedGEMMs(t *testing.T) {
	for _, c := range []struct {
		name            string
		taps            []int
		layers, anchors int
	}{{"default-taps", nil, 2, 5}, {"deep-tap", []int{0, 4}, 1, 9}, {"one-layer-dead-blocks", []int{2}, 1, 33}} {
		t.Run(c.name, func(t *testing.T) {
			o := tinyOptions()
			o.Taps, o.DrafterLayers, o.Anchors, o.Seed = c.taps, c.layers, c.anchors, testseed.Seed(t)
			dc := drafterConfig(o)
			cb := &countingBackend{Backend: tensor.NewCPU[float32](1)}
			s, err := newStepper(o, dc, CPUEnv(cb))
			if err != nil {
				t.Fatal(err)
			}
			b := dflash.MakeBatch(s.examples, s.rows, 0)
			b.SeqLen[1] = o.SeqLen/2 + s.rng.IntN(o.SeqLen/4) // a shorter row: at most 23 anchor candidates
			bl := dflash.BuildBlocks(dc, b, dflash.SampleBatchAnchors(s.rng, b, o.Anchors))
			if err := s.hidden(b); err != nil {
				t.Fatal(err)
			}
			tg, ta := cb.reset(t)
			tp := tensor.NewTape[float32](cb)
			out, err := s.drafter.Forward(tp, true, s.head, b, bl)
			if err != nil {
				t.Fatal(err)
			}
			fg, fa := cb.reset(t)
			tp.Backward(out.Loss)
			bg, _ := cb.reset(t)

			want := dflash.StepFLOPs(&o.Target, dc, b, bl)
			if got := tg + ta; got != want.TargetForward {
				t.Errorf("target forward: counted %g (GEMM %g + attention %g), StepFLOPs %g", got, tg, ta, want.TargetForward)
			}
			// The chunked cross-entropy computes the LM head's input gradient
			// (2·labels·H·V) in the forward pass; the attention backward is
			// counted as 2x its forward.
			labels := 0
			for i, l := range bl.Labels {
				if l >= 0 && bl.Weights[i] > 0 {
					labels++
				}
			}
			headDX := 2 * float64(labels) * float64(o.Target.HiddenSize) * float64(o.Target.VocabSize)
			if got := fg + fa - headDX; got != want.DrafterForward {
				t.Errorf("drafter forward: counted %g (GEMM %g - LM head dX %g + attention %g), StepFLOPs %g", got, fg, headDX, fa, want.DrafterForward)
			}
			if got := bg + headDX + 2*fa; got != want.DrafterBackward {
				t.Errorf("drafter backward: counted %g (GEMM %g + LM head dX %g + 2x attention %g), StepFLOPs %g", got, bg, headDX, fa, want.DrafterBackward)
			}
			t.Logf("taps %v, %d labels, %d/%d live blocks: %+v", dc.TargetLayerIDs, labels, bl.NumValid[0]+bl.NumValid[1], 2*bl.N, want)
		})
	}
}

// TestDrafterParams compares dflash.Config.ParamCount with the parameters dflash.New
// allocates.
func TestDrafterParams(t *testing.T) {
	for _, layers := range []int{1, 3} {
		o := tinyOptions()
		o.DrafterLayers = layers
		dc := drafterConfig(o)
		n := 0
		for _, p := range dflash.New[float32](dc, rand.New(rand.NewPCG(1, 2))).Params() {
			n += p.Numel()
		}
		if got := dc.ParamCount(); got != float64(n) {
			t.Errorf("%d layers: ParamCount %g, allocated %d", layers, got, n)
		}
	}
}

// TestAdamWConfigIsTrainDefault guards the optimizer the step times: the
// trainer's defaults.
func TestAdamWConfigIsTrainDefault(t *testing.T) {
	s, err := newStepper(tinyOptions(), drafterConfig(tinyOptions()), CPUEnv(tensor.NewCPU[float32](1)))
	if err != nil {
		t.Fatal(err)
	}
	if d := train.DefaultConfig(); s.cfg.LR != d.LR || s.cfg.GradClip != d.GradClip || s.cfg.Beta2 != d.Beta2 {
		t.Errorf("optimizer config %+v differs from train.DefaultConfig", s.cfg)
	}
}
