package data

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dflash/data/jsonl"
	"dflash/data/tokenizer"
)

func keys(samples []Sample) map[[2]string]int {
	m := map[[2]string]int{}
	for _, s := range samples {
		m[[2]string{fmt.Sprint(s.IDs), fmt.Sprint(s.Mask)}]++
	}
	return m
}

func target(t *testing.T) Target {
	tok, tmpl := model()
	return Target{Tokenizer: tok, Template: tmpl, Vocab: tok.VocabSize()}
}

// TestSameSamplesBothPaths reads the same JSONL through Prep (then the
// prepared directory) and through Load on the raw files, all with
// DefaultOptions: the samples must be the same multiset, and some
// conversations must be dropped so that the rules are exercised.
func TestSameSamplesBothPaths(t *testing.T) {
	needModel(t)
	opts := DefaultOptions()
	out := filepath.Join(t.TempDir(), "out")
	sum, err := prep(t, PrepConfig{Options: opts, Files: inputs, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Dropped[DropFewTokens] == 0 {
		t.Fatalf("no conversation dropped (%+v): the drop rule is not exercised", sum)
	}
	d, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	var prepared []Sample
	for i := range d.Len() {
		ids, mask := d.Sample(i)
		prepared = append(prepared, Sample{ids, mask})
	}
	defer d.Close()
	raw, rsum, err := Load(context.Background(), inputs[:1], opts, target(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	raw2, _, err := Load(context.Background(), inputs[1:2], opts, target(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	raw = append(raw, raw2...)
	viaDir, _, err := Load(context.Background(), []string{out}, opts, target(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := keys(prepared)
	if len(raw) != sum.Kept || fmt.Sprint(keys(raw)) != fmt.Sprint(want) || fmt.Sprint(keys(viaDir)) != fmt.Sprint(want) {
		t.Fatalf("prep kept %d samples, raw JSONL %d, prepared dir %d; the sets differ", sum.Kept, len(raw), len(viaDir))
	}
	// Several inputs are one input: both files at once, and the prepared
	// directory beside the files again (every sample twice).
	both, bsum, err := Load(context.Background(), inputs[:2], opts, target(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys(both)) != fmt.Sprint(want) || bsum.Kept != sum.Kept || bsum.Files != 2 {
		t.Fatalf("Load of both files: %d samples (summary %+v), want prep's %d", len(both), bsum, sum.Kept)
	}
	mixed, msum, err := Load(context.Background(), []string{out, inputs[0], inputs[1]}, opts, target(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	twice := keys(prepared)
	for k := range twice {
		twice[k] *= 2
	}
	if fmt.Sprint(keys(mixed)) != fmt.Sprint(twice) || msum.Kept != 2*sum.Kept {
		t.Fatalf("Load of the prepared directory and the files: %d samples (summary kept %d), want %d", len(mixed), msum.Kept, 2*sum.Kept)
	}
	if rsum.Kept == 0 || rsum.Lines == 0 {
		t.Fatalf("raw summary %+v", rsum)
	}
}

// TestEmptyInput: files with no conversation are an error naming them and
// the lines read, and leave no output.
func TestEmptyInput(t *testing.T) {
	needModel(t)
	dir := t.TempDir()
	empty, blank := filepath.Join(dir, "empty.jsonl"), filepath.Join(dir, "blank.jsonl")
	os.WriteFile(empty, nil, 0o644)
	os.WriteFile(blank, []byte("\n  \n"), 0o644)
	out := filepath.Join(dir, "out")
	_, err := prep(t, PrepConfig{Files: []string{empty, blank}, Out: out})
	want := fmt.Sprintf("no usable conversation in %s, %s: 0 lines read (and 2 blank)", empty, blank)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want %q", err, want)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("an empty run wrote its output")
	}
	_, _, err = Load(context.Background(), []string{blank}, DefaultOptions(), target(t), 1)
	if err == nil || !strings.Contains(err.Error(), "no usable conversation") {
		t.Fatalf("Load: got %v", err)
	}
}

// TestBadUTF8PerFile: a line that is not UTF-8 stops the run naming file and
// line; with SkipBadLines it is counted under its file.
func TestBadUTF8PerFile(t *testing.T) {
	needModel(t)
	dir := t.TempDir()
	good, _ := os.ReadFile(inputs[0])
	bad := "{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xe9\"}, {\"role\": \"assistant\", \"content\": \"x\"}]}\n"
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	os.WriteFile(a, append(append([]byte(bad), good...), bad...), 0o644)
	os.WriteFile(b, append([]byte(bad), good...), 0o644)
	_, err := prep(t, PrepConfig{Files: []string{a, b}})
	if err == nil || !strings.Contains(err.Error(), a+":1: invalid UTF-8: byte 46 (0xe9) is not UTF-8") {
		t.Fatalf("got %v", err)
	}
	sum, err := prep(t, PrepConfig{Options: Options{SkipBadLines: true}, Files: []string{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.BadFiles[a][jsonl.ReasonUTF8] != 2 || sum.BadFiles[b][jsonl.ReasonUTF8] != 1 || sum.BadLines[jsonl.ReasonUTF8] != 3 {
		t.Fatalf("bad lines by file %v, by reason %v; want 2 in a, 1 in b", sum.BadFiles, sum.BadLines)
	}
}

// TestOpenForTarget checks every way prepared ids can miss the target: another
// tokenizer, a tokenizer larger than the vocabulary, a flipped bit, an id
// past the vocabulary.
func TestOpenForTarget(t *testing.T) {
	needModel(t)
	tok, _ := model()
	out := filepath.Join(t.TempDir(), "out")
	if _, err := prep(t, PrepConfig{Files: inputs, Out: out, ShardTokens: 500}); err != nil {
		t.Fatal(err)
	}
	other, err := tokenizer.LoadDir(filepath.Join("..", "testdata-cache", "tokenizers", "llama3"))
	if err != nil {
		t.Skipf("llama3 tokenizer: %v", err)
	}
	if _, err := OpenFor(out, other, other.VocabSize()); err == nil || !strings.Contains(err.Error(), "prepared with another tokenizer") {
		t.Fatalf("another tokenizer: %v", err)
	}
	if err := CheckVocab(tok, 1000); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the tokenizer has %d tokens but the target's vocab_size is 1000", tok.VocabSize())) {
		t.Fatalf("CheckVocab: %v", err)
	}
	if _, err := OpenFor(out, tok, 1000); err == nil || !strings.Contains(err.Error(), "shard-0") || !strings.Contains(err.Error(), "outside the target's vocabulary [0, 1000)") {
		t.Fatalf("ids past the vocabulary: %v", err)
	}
	d, err := OpenFor(out, tok, tok.VocabSize())
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	shard1 := filepath.Join(out, "shard-00001.bin")
	f, _ := os.OpenFile(shard1, os.O_RDWR, 0)
	st, _ := f.Stat()
	one := []byte{0}
	f.ReadAt(one, st.Size()-2)
	one[0] ^= 4
	f.WriteAt(one, st.Size()-2)
	f.Close()
	if _, err := OpenFor(out, tok, tok.VocabSize()); err == nil || !strings.Contains(err.Error(), shard1) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("flipped bit: %v", err)
	}
}
