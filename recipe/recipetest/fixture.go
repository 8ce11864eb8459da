// Package recipetest writes training fixtures for tests: a small random
// Qwen3 target with the demo's tokenizer and chat template, and
// conversations made from Go source.
package recipetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dflash/data/chat"
	"dflash/demo"
	"dflash/model"
)

// Fixture writes, under a temporary directory of t, a tiny random Qwen3
// target (4 layers, hidden size 32, head dimension 16: CPU only) with the
// demo tokenizer, and a JSONL file of conversations made from Go source.
func Fixture(t testing.TB) (targetDir, dataPath string) {
	t.Helper()
	return WriteFixture(t, t.TempDir(), model.Config{Arch: model.Qwen3, VocabSize: 300, HiddenSize: 32, IntermediateSize: 64,
		NumLayers: 4, NumHeads: 2, NumKVHeads: 1, HeadDim: 16, RMSNormEps: 1e-6, RopeTheta: 10000,
		MaxPositionEmbeddings: 1024}, 60<<10)
}

// WriteFixture writes the target of config c (random weights) with the
// demo tokenizer (a BPE of 300 ids trained on the corpus) to dir/target and
// conversations made from up to corpus bytes of Go source (one per file of
// 12 lines or more: 4 lines asked, 8 answered; at most 42 below 1 MiB) to
// dir/conv.jsonl.
func WriteFixture(t testing.TB, dir string, c model.Config, corpus int) (targetDir, dataPath string) {
	t.Helper()
	docs, err := demo.GoCorpus(demo.CorpusOptions{MaxBytes: corpus})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, d := range docs {
		texts = append(texts, d.Text)
	}
	bpe, err := demo.TrainBPE(texts, demo.BPEOptions{VocabSize: 300, Specials: demo.DemoSpecials})
	if err != nil {
		t.Fatal(err)
	}
	targetDir = filepath.Join(dir, "target")
	if err := bpe.WriteTokenizerDir(targetDir); err != nil {
		t.Fatal(err)
	}
	m, err := model.New(c, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(targetDir, "F32"); err != nil {
		t.Fatal(err)
	}
	dataPath = filepath.Join(dir, "conv.jsonl")
	var sb strings.Builder
	for i, d := range docs {
		lines := strings.Split(d.Text, "\n")
		if len(lines) < 12 {
			continue
		}
		msgs := []chat.Message{{Role: "user", Content: strings.Join(lines[:4], "\n")}, {Role: "assistant", Content: strings.Join(lines[4:12], "\n")}}
		b, _ := json.Marshal(map[string]any{"messages": msgs})
		sb.Write(b)
		sb.WriteByte('\n')
		if corpus < 1<<20 && i > 40 {
			break
		}
	}
	if err := os.WriteFile(dataPath, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return targetDir, dataPath
}
