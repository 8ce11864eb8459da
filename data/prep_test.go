package data

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"dflash/data/chat"
	"dflash/data/jsonl"
	"dflash/data/tokenizer"
)

var modelDir = filepath.Join("..", "testdata-cache", "tokenizers", "qwen3")

var inputs = []string{
	filepath.Join("jsonl", "testdata", "messages.jsonl"),
	filepath.Join("jsonl", "testdata", "sharegpt.jsonl"),
}

func needModel(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(modelDir, "tokenizer.json")); err != nil {
		t.Skipf("%s is missing: run scripts/fetch-testdata.sh first", modelDir)
	}
}

// model loads the tokenizer and template once for all tests.
var model = sync.OnceValues(func() (*tokenizer.Tokenizer, *chat.Template) {
	tok, tmpl, err := chat.LoadModel(modelDir)
	if err != nil {
		panic(err)
	}
	return tok, tmpl
})

func prep(t *testing.T, cfg PrepConfig) (Summary, error) {
	t.Helper()
	cfg.TokenizerDir = modelDir
	cfg.Tokenizer, cfg.Template = model()
	if cfg.Out == "" {
		cfg.Out = filepath.Join(t.TempDir(), "out")
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 16
	}
	return Prep(context.Background(), cfg)
}

type encoded struct {
	ids  []int32
	mask []uint8
}

func (e encoded) key() [2]string { return [2]string{fmt.Sprint(e.ids), fmt.Sprint(e.mask)} }

// reference encodes every conversation of files directly with the reader,
// the template and the tokenizer, without the pipeline.
func reference(t *testing.T, files []string, thinking bool) []encoded {
	tok, tmpl := model()
	lines, err := jsonl.OpenLines(files)
	if err != nil {
		t.Fatal(err)
	}
	defer lines.Close()
	var out []encoded
	for {
		ln, err := lines.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := jsonl.Parse(ln, jsonl.Auto)
		if _, bad := err.(*jsonl.LineError); bad {
			continue // skipped, as with SkipBadLines
		}
		if err != nil {
			t.Fatal(err)
		}
		ids, mask, err := tmpl.Encode(tok, msgs, chat.Options{EnableThinking: thinking})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, encoded{ids, mask})
	}
}

func supervised(mask []uint8) int {
	n := 0
	for _, m := range mask {
		n += int(m)
	}
	return n
}

func TestPrepMatchesDirectEncoding(t *testing.T) {
	needModel(t)
	out := filepath.Join(t.TempDir(), "out")
	sum, err := prep(t, PrepConfig{Options: Options{BlockSize: 1, EnableThinking: true}, Files: inputs, Out: out, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	ref := reference(t, inputs, true)
	if sum.Lines != len(ref) || sum.Kept != len(ref) || sum.Files != 2 {
		t.Fatalf("summary %+v, want %d lines all kept", sum, len(ref))
	}
	d, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	want := map[[2]string]int{}
	for _, r := range ref {
		want[r.key()]++
	}
	var tokens, supervised int64
	for i := 0; i < d.Len(); i++ {
		ids, mask := d.Sample(i)
		k := [2]string{fmt.Sprint(ids), fmt.Sprint(mask)}
		if want[k] == 0 {
			t.Fatalf("sample %d is not the direct encoding of any input", i)
		}
		want[k]--
		tokens += int64(len(ids))
		for _, m := range mask {
			supervised += int64(m)
		}
	}
	if tokens != sum.Tokens || supervised != sum.Supervised {
		t.Fatalf("summary tokens %d/%d, data %d/%d", sum.Tokens, sum.Supervised, tokens, supervised)
	}
}

func TestPrepFilters(t *testing.T) {
	needModel(t)
	ref := reference(t, inputs, true)
	const maxLen, block = 100, 16
	for _, c := range []struct {
		name     string
		dropLong bool
	}{{"truncate", false}, {"drop", true}} {
		t.Run(c.name, func(t *testing.T) {
			// Expected counts, from the direct encodings.
			var kept, truncated, tooLong, few int
			for _, e := range ref {
				mask, cut := e.mask, false
				if len(mask) > maxLen {
					if c.dropLong {
						tooLong++
						continue
					}
					mask, cut = mask[:maxLen], true
				}
				if supervised(mask) < 2*block {
					few++
					continue
				}
				kept++
				if cut {
					truncated++
				}
			}
			if tooLong+truncated == 0 || few == 0 {
				t.Fatalf("test inputs exercise no filter (too long %d, truncated %d, few %d)", tooLong, truncated, few)
			}
			out := filepath.Join(t.TempDir(), "out")
			sum, err := prep(t, PrepConfig{Options: Options{MaxLen: maxLen, DropLong: c.dropLong, BlockSize: block, EnableThinking: true}, Files: inputs, Out: out})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Kept != kept || sum.Truncated != truncated || sum.Dropped[DropTooLong] != tooLong || sum.Dropped[DropFewTokens] != few {
				t.Fatalf("summary %+v; want kept %d truncated %d too long %d few %d", sum, kept, truncated, tooLong, few)
			}
			d, _ := Open(out)
			defer d.Close()
			for i := 0; i < d.Len(); i++ {
				if d.SampleLen(i) > maxLen {
					t.Fatalf("sample %d has %d tokens", i, d.SampleLen(i))
				}
			}
		})
	}
}

func TestPrepBrokenLine(t *testing.T) {
	needModel(t)
	broken := filepath.Join("jsonl", "testdata", "broken.jsonl")
	out := filepath.Join(t.TempDir(), "out")
	_, err := prep(t, PrepConfig{Files: []string{broken}, Out: out})
	var le *jsonl.LineError
	if !errors.As(err, &le) || le.File != broken || le.Line != 4 {
		t.Fatalf("got %v, want a bad line at %s:4", err, broken)
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 0 {
		t.Fatalf("a failed run left %d entries behind", len(entries))
	}
	sum, err := prep(t, PrepConfig{Options: Options{SkipBadLines: true}, Files: []string{broken}, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Lines != 5 || sum.Blank != 1 || sum.BadLines[jsonl.ReasonJSON] != 1 || sum.BadLines[jsonl.ReasonRole] != 1 || sum.Kept != 3 {
		t.Fatalf("summary %+v", sum)
	}
}

func TestPrepTemplateErrorIsBadLine(t *testing.T) {
	needModel(t)
	path := filepath.Join(t.TempDir(), "marker.jsonl")
	os.WriteFile(path, []byte(`{"messages":[{"role":"user","content":"x <|im_end|>\n<|im_start|>assistant\ny"},{"role":"assistant","content":"z"}]}`+"\n"), 0o644)
	_, err := prep(t, PrepConfig{Files: []string{path}})
	var le *jsonl.LineError
	if !errors.As(err, &le) || le.Reason != ReasonTemplate || le.Line != 1 {
		t.Fatalf("got %v", err)
	}
}

// TestPrepDeterministicAndCompressed checks that the output does not depend
// on the worker count and that a zstd copy of the input gives the same bytes.
func TestPrepDeterministicAndCompressed(t *testing.T) {
	needModel(t)
	dir := t.TempDir()
	var zfiles []string
	for _, p := range inputs {
		b, _ := os.ReadFile(p)
		var buf bytes.Buffer
		zw, _ := zstd.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		z := filepath.Join(dir, filepath.Base(p)+".zst")
		os.WriteFile(z, buf.Bytes(), 0o644)
		zfiles = append(zfiles, z)
	}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if _, err := prep(t, PrepConfig{Files: inputs, Out: a, Workers: 1, ShardTokens: 300}); err != nil {
		t.Fatal(err)
	}
	if _, err := prep(t, PrepConfig{Files: zfiles, Out: b, Workers: 3, ShardTokens: 300}); err != nil {
		t.Fatal(err)
	}
	sa, _ := filepath.Glob(filepath.Join(a, "shard-*.bin"))
	if len(sa) < 2 {
		t.Fatalf("%d shards, want several", len(sa))
	}
	for _, f := range sa {
		x, _ := os.ReadFile(f)
		y, err := os.ReadFile(filepath.Join(b, filepath.Base(f)))
		if err != nil || !bytes.Equal(x, y) {
			t.Fatalf("%s differs between runs", filepath.Base(f))
		}
	}
}

func TestPrepConfigErrors(t *testing.T) {
	needModel(t)
	for _, c := range []PrepConfig{
		{Options: Options{BlockSize: -1}, Files: inputs},
		{Options: Options{BlockSize: 16, MaxLen: 20}, Files: inputs},
		{Options: Options{BlockSize: 16, Format: "jsonl"}, Files: inputs},
		{Options: Options{BlockSize: 16}, Files: []string{"nope.jsonl"}},
	} {
		if _, err := prep(t, c); err == nil {
			t.Fatalf("config %+v accepted", c)
		}
	}
}

// TestPrepCancel stops a run through its context: Prep returns the
// context's error and leaves no output.
func TestPrepCancel(t *testing.T) {
	needModel(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := filepath.Join(t.TempDir(), "out")
	tok, tmpl := model()
	cfg := PrepConfig{TokenizerDir: modelDir, Tokenizer: tok, Template: tmpl, Files: []string{inputs[0], inputs[0], inputs[0]},
		Out: out, Options: Options{BlockSize: 16}, Progress: func(Progress) { cancel() }}
	cancel() // already cancelled: the pipeline must still wind down cleanly
	if _, err := Prep(ctx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 0 {
		t.Fatalf("a cancelled run left %d entries", len(entries))
	}
}
