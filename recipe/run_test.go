package recipe_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"dflash/model/dflash"
	"dflash/recipe"
	"dflash/recipe/recipetest"
	"dflash/train"
)

// tinySpec returns the spec of a short CPU run on recipetest's fixture.
func tinySpec(t *testing.T) recipe.Spec {
	targetDir, dataPath := recipetest.Fixture(t)
	s := recipe.Spec{TargetDir: targetDir, DataPaths: []string{dataPath}, Options: recipe.DefaultOptions()}
	s.Out, s.Steps, s.Progress, s.Plot, s.TensorBoard, s.WarmupSteps, s.EvalEvery = filepath.Join(t.TempDir(), "run"), 2, "off", false, false, 1, 0
	s.Drafter.BlockSize, s.Drafter.Anchors, s.Drafter.Export = 4, 4, "F32"
	s.Data.BatchSize, s.Data.MaxLen = 2, 300
	return s
}

// TestRun trains a drafter without the CLI: the drafter of the recipe's
// choices (the middle layer of 4 tapped, <|MASK|> of the demo tokenizer,
// id 299) is exported, every step record carries the MFU over the peak the
// recipe derives, and the evaluation split is the recipe's.
func TestRun(t *testing.T) {
	s := tinySpec(t)
	res, err := recipe.Run(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if res.Train == nil || res.Train.Steps != 2 || res.Drafter != filepath.Join(s.Out, "drafter") || res.Buckets != nil {
		t.Fatalf("result %+v", res)
	}
	d, err := dflash.LoadDir[float32](res.Drafter)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Cfg.TargetLayerIDs, []int{2}) || d.Cfg.MaskTokenID != 299 || d.Cfg.BlockSize != 4 {
		t.Fatalf("drafter config %+v", d.Cfg)
	}
	recs, err := train.ReadMetrics(filepath.Join(s.Out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	peak, _ := recipe.MFUPeak(0, nil, 0)
	for _, r := range recs {
		if v := r.Values; r.Kind == "train" && (peak == 0 || !(v["mfu"] > 0) || v["mfu"] != v["tflops"]/peak) {
			t.Errorf("step %d: tflops %v, mfu %v over %v", r.Step, v["tflops"], v["mfu"], peak)
		}
	}
	// --peak-tflops overrides the derived peak.
	s.Out, s.PeakTFLOPS = filepath.Join(t.TempDir(), "given"), 0.5
	if _, err := recipe.Run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if recs, err = train.ReadMetrics(filepath.Join(s.Out, "metrics.jsonl")); err != nil || len(recs) == 0 {
		t.Fatal(recs, err)
	}
	for _, r := range recs {
		if v := r.Values; r.Kind == "train" && v["mfu"] != v["tflops"]/0.5 {
			t.Errorf("--peak-tflops 0.5, step %d: tflops %v, mfu %v", r.Step, v["tflops"], v["mfu"])
		}
	}
}

// TestRunRefuses: what the recipe checks before anything is written, each
// error naming the option as the user gave it.
func TestRunRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*recipe.Spec)
		want string
	}{
		{"tap past the target", func(s *recipe.Spec) { s.Drafter.Taps = []int{1, 4} },
			"--drafter.taps [1 4]: layer 4 is outside the target's 4 layers (0..3)"},
		{"mask past the embedding", func(s *recipe.Spec) { s.Drafter.MaskTokenID = 300 },
			"--drafter.mask-token-id: id 300 is outside the target's vocabulary [0, 300)"},
		{"named by its source", func(s *recipe.Spec) {
			s.Drafter.MaskTokenID = 301
			s.Source = func(name string) string { return "c.yaml line 3: " + name }
		}, "c.yaml line 3: drafter.mask-token-id: id 301 is outside"},
		{"gpus on the cpu", func(s *recipe.Spec) { s.GPUs = "0" }, `--gpus "0" needs --device cuda`},
		{"one conversation", func(s *recipe.Spec) {
			one := filepath.Join(t.TempDir(), "one.jsonl")
			raw, _ := os.ReadFile(s.DataPaths[0])
			os.WriteFile(one, raw[:strings.IndexByte(string(raw), '\n')+1], 0o644)
			s.DataPaths = []string{one}
		}, "1 usable conversations, need at least 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := tinySpec(t)
			c.edit(&s)
			res, err := recipe.Run(context.Background(), s)
			if err == nil || !strings.Contains(err.Error(), c.want) || res != nil {
				t.Fatalf("%v (%+v), want %q", err, res, c.want)
			}
			if _, err := os.Stat(s.Out); !os.IsNotExist(err) {
				t.Fatalf("%s was written", s.Out)
			}
		})
	}
}

// TestOptionsValidate: the spec evaluation's options are checked with the
// rest (train.Options).
func TestOptionsValidate(t *testing.T) {
	o := recipe.DefaultOptions()
	if err := train.BindOptions(nil, &o).Validate(); err != nil {
		t.Fatal(err)
	}
	o.SpecEvalEvery, o.SpecPrompts = 5, 0
	if err := train.BindOptions(nil, &o).Validate(); err == nil || !strings.Contains(err.Error(), "spec-prompts") {
		t.Fatalf("spec-prompts 0: %v", err)
	}
}
