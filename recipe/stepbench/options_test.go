package stepbench

import (
	"math"
	"slices"
	"strings"
	"testing"

	"dflash/internal/testseed"
)

// TestRefusesShapeThatDoesNotFit: the issue's case (qwen3-8b, 3072 tokens,
// batch 4, 512 anchors, 5 drafter layers) on a 24 GiB host is refused
// before anything is allocated, with the bytes needed and available.
func TestRefusesShapeThatDoesNotFit(t *testing.T) {
	defer func(f func() (uint64, bool)) { availableMemory = f }(availableMemory)
	availableMemory = func() (uint64, bool) { return 24 << 30, true }
	tc, err := Target("qwen3-8b")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Device: "cpu", TargetName: "qwen3-8b", Target: tc, SeqLen: 3072, Batch: 4, Anchors: 512, BlockSize: 16,
		DrafterLayers: 5, Steps: 1}
	_, err = Run(o)
	if err == nil {
		t.Fatal("qwen3-8b accepted on a 24 GiB host")
	}
	for _, want := range []string{"--target-config qwen3-8b", "target weights 30.5 GiB as float32", "8.19e+09 parameters",
		"more than the 24.0 GiB available"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// The estimate's parts: the weights are 4 bytes a parameter, the drafter
	// state 16, and a shape that fits passes.
	dc := drafterConfig(o)
	m := estimateMemory(o, dc)
	if m.TargetWeights != 4*tc.ParamCount() || m.DrafterState != 16*dc.ParamCount() || !(m.Activations > 0) {
		t.Errorf("estimate %+v", m)
	}
	small, _ := Target("qwen3-0.6b")
	o = Options{TargetName: "qwen3-0.6b", Target: small, SeqLen: 512, Batch: 1, Anchors: 64, BlockSize: 16, DrafterLayers: 1}
	dc = drafterConfig(o)
	if err := checkMemory(o, dc, estimateMemory(o, dc)); err != nil {
		t.Errorf("qwen3-0.6b at 512 tokens refused on 24 GiB: %v", err)
	}
}

// TestOptionErrorsNameTheFlag checks that every bad option is refused with
// its flag named.
func TestOptionErrorsNameTheFlag(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"device", func(o *Options) { o.Device = "tpu" }, `--device "tpu": unknown device`},
		{"seq-len", func(o *Options) { o.SeqLen = 1 }, "--seq-len 1: must be >= 2"},
		{"batch", func(o *Options) { o.Batch = 0 }, "--batch 0: must be >= 1"},
		{"block-size", func(o *Options) { o.BlockSize = 1 }, "--block-size 1: must be >= 2"},
		{"drafter-layers", func(o *Options) { o.DrafterLayers = 0 }, "--drafter-layers 0: must be >= 1"},
		{"steps", func(o *Options) { o.Steps = 0 }, "--steps 0: must be >= 1"},
		{"warmup", func(o *Options) { o.Warmup = -1 }, "--warmup -1: must be >= 0"},
		{"anchors", func(o *Options) { o.Anchors = 35 }, "--anchors 35: a --seq-len 40 sequence has only 34 anchor candidates"},
		{"taps", func(o *Options) { o.Taps = []int{1, 6} }, "--taps [1 6]: layer 6 is outside the target's 6 layers (0..5)"},
		{"peak", func(o *Options) { o.PeakTFLOPS = math.NaN() }, "--peak-tflops NaN: must be >= 0"},
		{"target", func(o *Options) { o.Target.NumKVHeads = 3 }, "--target-config tiny: num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := tinyOptions()
			c.edit(&o)
			_, err := Run(o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	if _, err := Target("qwen3-9b"); err == nil || !strings.Contains(err.Error(), `--target-config "qwen3-9b": unknown (want one of qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b)`) {
		t.Errorf("unknown target: %v", err)
	}
}

// TestTargetsMatchModelCards checks the shapes against the parameter
// counts the Qwen3 model cards publish (total and non-embedding, in
// billions, to their stated precision).
func TestTargetsMatchModelCards(t *testing.T) {
	for name, card := range map[string]struct{ total, nonEmbedding, unit float64 }{
		"qwen3-0.6b": {0.6, 0.44, 0.01}, "qwen3-1.7b": {1.7, 1.4, 0.1}, "qwen3-4b": {4.0, 3.6, 0.1}, "qwen3-8b": {8.2, 6.95, 0.01},
	} {
		c, err := Target(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		emb := float64(c.VocabSize * c.HiddenSize)
		if !c.TieWordEmbeddings {
			emb *= 2
		}
		total := c.ParamCount()
		round := func(x, unit float64) float64 { return math.Round(x/unit) * unit }
		if got := round((total-emb)/1e9, card.unit); math.Abs(got-card.nonEmbedding) > 1e-9 {
			t.Errorf("%s: %.4gB non-embedding parameters, the model card says %.3gB", name, (total-emb)/1e9, card.nonEmbedding)
		}
		if got := round(total/1e9, 0.1); math.Abs(got-card.total) > 1e-9 {
			t.Errorf("%s: %.4gB parameters, the model card says %.2gB", name, total/1e9, card.total)
		}
	}
}

// TestDryRunIssueCase: a dry run of the issue's case allocates nothing and
// times nothing, and its FLOP count is within 10% of the count implied by
// the PyTorch trainer's stated MFU for the same step on our H200 (40% of
// 989 TFLOP/s over 1.24 s: 490 TFLOP; docs/PERF.md compares the two).
func TestDryRunIssueCase(t *testing.T) {
	tc, _ := Target("qwen3-8b")
	o := Options{Device: "cuda", TargetName: "qwen3-8b", Target: tc, SeqLen: 3072, Batch: 4, Anchors: 512, BlockSize: 16,
		DrafterLayers: 5, Steps: 1, Seed: testseed.Seed(t), DryRun: true}
	r, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	// A dry run opens no GPU: its peak is unknown unless given.
	if r.StepMS != 0 || r.Steps != 0 || !slices.Equal(r.Taps, []int{1, 9, 17, 25, 33}) || r.PeakTFLOPS != 0 || !strings.Contains(r.PeakSource, "--peak-tflops") {
		t.Errorf("dry run report %+v", r)
	}
	o.PeakTFLOPS = 989
	if g, err := Run(o); err != nil || g.PeakTFLOPS != 989 || g.PeakSource != "--peak-tflops" {
		t.Errorf("dry run with --peak-tflops 989: peak %v (%s), %v", g.PeakTFLOPS, g.PeakSource, err)
	}
	implied := 0.40 * 989e12 * 1.24
	if ratio := r.FLOPs.Total() / implied; ratio < 0.9 || ratio > 1.1 {
		t.Errorf("%.4g FLOPs per step, %.2fx the %.4g the PyTorch trainer's MFU implies", r.FLOPs.Total(), ratio, implied)
	}
	t.Logf("%+v, %.3fx of the PyTorch-implied count", r.FLOPs, r.FLOPs.Total()/implied)
}
