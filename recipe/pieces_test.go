package recipe_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"dflash/data/tokenizer"
	"dflash/demo"
	"dflash/model"
	"dflash/recipe"
	"dflash/recipe/recipetest"
)

// bpeTokenizer trains a BPE of vocab ids with the given special tokens on
// Go source and loads it as the trainer does.
func bpeTokenizer(t *testing.T, vocab int, specials []string) *tokenizer.Tokenizer {
	t.Helper()
	docs, err := demo.GoCorpus(demo.CorpusOptions{MaxBytes: 20 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, d := range docs {
		texts = append(texts, d.Text)
	}
	bpe, err := demo.TrainBPE(texts, demo.BPEOptions{VocabSize: vocab, Specials: specials})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := bpe.WriteTokenizerDir(dir); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestMaskToken: a given id inside the embedding; else the tokenizer's
// <|MASK|>; else the first id past the tokenizer's vocabulary when the
// embedding has that row; else an error that names the flag.
func TestMaskToken(t *testing.T) {
	withMask := bpeTokenizer(t, 300, demo.DemoSpecials)
	plain := bpeTokenizer(t, 280, []string{demo.TokEndOfText})
	maskID, ok := withMask.TokenID(demo.TokMask)
	if !ok || plain.VocabSize() != 280 {
		t.Fatalf("fixture tokenizers: <|MASK|> %d %v, plain vocabulary %d", maskID, ok, plain.VocabSize())
	}
	for _, c := range []struct {
		name      string
		id        int
		tok       *tokenizer.Tokenizer
		vocab     int
		want      int
		wantError string
	}{
		{"given", 7, withMask, 300, 7, ""},
		{"given past the embedding", 300, withMask, 300, 0, "id 300 is outside the target's vocabulary [0, 300)"},
		{"the tokenizer's <|MASK|>", -1, withMask, 320, int(maskID), ""},
		{"a spare embedding row", -1, plain, 288, 280, ""},
		{"no spare row", -1, plain, 280, 0, "set --drafter.mask-token-id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := recipe.MaskToken(c.id, c.tok, c.vocab)
			if c.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantError) {
					t.Fatalf("err %v, want %q", err, c.wantError)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("%d, %v; want %d", got, err, c.want)
			}
		})
	}
}

// TestPadToken: the tokenizer's <|endoftext|>, else 0.
func TestPadToken(t *testing.T) {
	tok := bpeTokenizer(t, 280, []string{demo.TokImStart, demo.TokEndOfText})
	if eot, ok := tok.TokenID(demo.TokEndOfText); !ok || eot == 0 || recipe.PadToken(tok) != eot {
		t.Fatalf("pad %d, <|endoftext|> %d %v", recipe.PadToken(tok), eot, ok)
	}
	if p := recipe.PadToken(bpeTokenizer(t, 270, nil)); p != 0 {
		t.Fatalf("without <|endoftext|>: pad %d, want 0", p)
	}
}

// TestSplit: the held-out share is min(max, max(1, n·fraction)) of a
// shuffle that the seed decides, and the two parts are the examples.
func TestSplit(t *testing.T) {
	ids := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i
		}
		return s
	}
	for _, c := range []struct {
		n        int
		fraction float64
		max      int
		wantEval int
	}{
		{40, 0.05, 256, 2}, {40, 0, 256, 1}, {10, 0.5, 3, 3}, {2, 0.05, 256, 1},
	} {
		tr, ev := recipe.Split(ids(c.n), 7, c.fraction, c.max)
		if len(ev) != c.wantEval || len(tr) != c.n-c.wantEval {
			t.Errorf("%+v: %d train, %d eval", c, len(tr), len(ev))
		}
		all := slices.Sorted(slices.Values(append(slices.Clone(tr), ev...)))
		if !slices.Equal(all, ids(c.n)) {
			t.Errorf("%+v: train %v and eval %v are not the examples", c, tr, ev)
		}
	}
	a, _ := recipe.Split(ids(40), 7, 0.05, 256)
	b, _ := recipe.Split(ids(40), 7, 0.05, 256)
	o, _ := recipe.Split(ids(40), 8, 0.05, 256)
	if !slices.Equal(a, b) || slices.Equal(a, o) || slices.IsSorted(a) {
		t.Errorf("seed 7 twice: %v, %v; seed 8: %v", a, b, o)
	}
}

// TestDrafterConfig: the options over dflash.DrafterConfigFor's defaults.
func TestDrafterConfig(t *testing.T) {
	tc := &model.Config{Arch: model.Qwen3, VocabSize: 300, HiddenSize: 32, IntermediateSize: 64, NumLayers: 8, NumHeads: 2,
		NumKVHeads: 1, HeadDim: 16, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 1024}
	o := recipe.DefaultOptions().Drafter
	o.Layers, o.BlockSize, o.Anchors = 2, 8, 33
	dc := recipe.DrafterConfig(tc, o, 299)
	if !slices.Equal(dc.TargetLayerIDs, []int{1, 5}) || dc.NumAnchors != 33 || dc.MaskTokenID != 299 || dc.IntermediateSize != 64 || dc.BlockSize != 8 {
		t.Fatalf("defaults: %+v", dc)
	}
	o.Taps, o.Gamma, o.Intermediate = []int{6}, 3.5, 48
	dc = recipe.DrafterConfig(tc, o, 299)
	if !slices.Equal(dc.TargetLayerIDs, []int{6}) || dc.Gamma != 3.5 || dc.IntermediateSize != 48 {
		t.Fatalf("given taps, gamma and width: %+v", dc)
	}
}

// TestRunIdentity: the identity names the drafter's shape, the target, the
// tokenizer, the data (its content) and the split, and the buckets only
// when there are any.
func TestRunIdentity(t *testing.T) {
	targetDir, dataPath := recipetest.Fixture(t)
	tok, err := tokenizer.LoadDir(targetDir)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := model.ReadConfig(filepath.Join(targetDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	dc := recipe.DrafterConfig(tc, recipe.DefaultOptions().Drafter, 299)
	id, err := recipe.RunIdentity(targetDir, []string{dataPath}, dc, tok, 40, 2, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"drafter.layers": "1", "drafter.block-size": "16", "drafter.taps": "2", "drafter.mask-token-id": "299",
		"drafter.intermediate-size": "64", "tokenizer": "sha256:" + tok.Hash(), "conversations": "40 train, 2 eval"}
	for k, v := range want {
		if id[k] != v {
			t.Errorf("%s: %q, want %q", k, id[k], v)
		}
	}
	if _, ok := id["data.buckets"]; ok || !strings.HasPrefix(id["data"], "sha256:") || !strings.HasPrefix(id["target config.json"], "sha256:") {
		t.Errorf("identity %v", id)
	}
	withBuckets, _ := recipe.RunIdentity(targetDir, []string{dataPath}, dc, tok, 40, 2, 3, 0)
	if withBuckets["data.buckets"] != "3" {
		t.Errorf("with 3 buckets: %v", withBuckets)
	}
	raw, err := os.ReadFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	fewer := filepath.Join(t.TempDir(), "fewer.jsonl")
	if err := os.WriteFile(fewer, raw[:bytes.LastIndexByte(raw[:len(raw)-1], '\n')+1], 0o644); err != nil {
		t.Fatal(err)
	}
	if other, err := recipe.RunIdentity(targetDir, []string{fewer}, dc, tok, 40, 2, 0, 0); err != nil || other["data"] == id["data"] {
		t.Errorf("one conversation fewer: data %s, the whole file's %s (%v)", other["data"], id["data"], err)
	}
	if _, err := recipe.RunIdentity(targetDir, []string{filepath.Join(t.TempDir(), "none.jsonl")}, dc, tok, 40, 2, 0, 0); err == nil {
		t.Error("missing data: no error")
	}
}

// TestSpecEvalEvery checks --spec-eval-every's resolution: a value given is
// kept on either device; the default, -1, is GPUSpecEvalEvery on cuda and
// never on the cpu.
func TestSpecEvalEvery(t *testing.T) {
	if d := recipe.DefaultOptions().SpecEvalEvery; d != -1 {
		t.Fatalf("default spec-eval-every %d, want -1", d)
	}
	for _, c := range []struct {
		every  int
		device string
		fp8    bool
		want   int
	}{{-1, "cuda", false, recipe.GPUSpecEvalEvery}, {-1, "cpu", false, 0}, {0, "cuda", false, 0}, {7, "cuda", false, 7},
		{7, "cpu", false, 7}, {-1, "cuda", true, 0}} {
		if got := recipe.SpecEvalEvery(c.every, c.device, c.fp8); got != c.want {
			t.Errorf("spec-eval-every %d on %s (fp8 %v): %d, want %d", c.every, c.device, c.fp8, got, c.want)
		}
	}
}
