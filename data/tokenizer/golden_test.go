package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// The golden ids come from HF tokenizers on the GPU machine; regenerate them
// with scripts/golden_tokenizers.py (see its doc string) and copy its
// tokenizer_golden.json here as testdata/golden.json.

// cacheDir is where scripts/fetch-testdata.sh puts the tokenizer files.
var cacheDir = filepath.Join("..", "..", "testdata-cache", "tokenizers")

var loaded sync.Map // name -> *Tokenizer

// loadCached returns the fetched tokenizer name, skipping the test when
// testdata-cache is missing.
func loadCached(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	if t, ok := loaded.Load(name); ok {
		return t.(*Tokenizer)
	}
	path := filepath.Join(cacheDir, name, "tokenizer.json")
	if _, err := os.Stat(path); err != nil {
		tb.Skipf("%s is missing: run scripts/fetch-testdata.sh first", path)
	}
	t, err := LoadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	loaded.Store(name, t)
	return t
}

type goldenFile struct {
	Version string `json:"tokenizers_version"`
	Texts   []struct {
		Name string `json:"name"`
		Text string `json:"text"`
	} `json:"texts"`
	IDs    map[string][][]int32  `json:"ids"`
	Pieces map[string][][]string `json:"pieces"` // pre-tokenizer output, byte-level alphabet
}

func readGolden(t *testing.T) *goldenFile {
	b, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

func TestGoldenIDs(t *testing.T) {
	forEachGolden(t, "id", func(g *goldenFile) map[string][][]int32 { return g.IDs }, func(t *testing.T, g *goldenFile, tok *Tokenizer, want [][]int32) {
		bad := 0
		for i, tx := range g.Texts {
			got := tok.Encode(tx.Text)
			if !slices.Equal(got, want[i]) {
				bad++
				if bad <= 5 {
					t.Errorf("%s %q:\n got %v\nwant %v", tx.Name, tx.Text, got, want[i])
				}
				continue
			}
			// Round trip: decode gives the text, in NFC where the tokenizer normalises.
			wantText := tx.Text
			if tok.NFC() {
				wantText = norm.NFC.String(wantText)
			}
			if d := tok.Decode(got, false); d != wantText {
				t.Errorf("%s: decode %q, want %q", tx.Name, d, wantText)
			}
		}
		if bad > 0 {
			t.Fatalf("%d of %d texts differ from HF tokenizers %s", bad, len(g.Texts), g.Version)
		}
		// The batch path gives the same ids.
		texts := make([]string, len(g.Texts))
		for i := range texts {
			texts[i] = g.Texts[i].Text
		}
		for i, ids := range tok.EncodeBatch(texts, runtime.GOMAXPROCS(0)) {
			if !slices.Equal(ids, want[i]) {
				t.Fatalf("EncodeBatch %s differs from golden", g.Texts[i].Name)
			}
		}
	})
}

// forEachGolden runs check as a subtest on each tokenizer of the golden
// file with its golden lists (what names them), which must hold one list
// per text.
func forEachGolden[T any](t *testing.T, what string, lists func(*goldenFile) map[string][][]T, check func(t *testing.T, g *goldenFile, tok *Tokenizer, want [][]T)) {
	g := readGolden(t)
	for _, name := range []string{"qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			tok := loadCached(t, name)
			want := lists(g)[name]
			if len(want) != len(g.Texts) {
				t.Fatalf("golden has %d %s lists for %d texts", len(want), what, len(g.Texts))
			}
			check(t, g, tok, want)
		})
	}
}

// TestGoldenPieces compares the split stages alone with HF's
// pre_tokenize_str on the normalised texts.
func TestGoldenPieces(t *testing.T) {
	forEachGolden(t, "piece", func(g *goldenFile) map[string][][]string { return g.Pieces }, func(t *testing.T, g *goldenFile, tok *Tokenizer, want [][]string) {
		for i, tx := range g.Texts {
			text := tx.Text
			if tok.NFC() {
				text = norm.NFC.String(text)
			}
			var got []string
			for _, p := range splitAll(tok, text) {
				got = append(got, toByteLevel(p))
			}
			if !reflect.DeepEqual(got, want[i]) && !(len(got) == 0 && len(want[i]) == 0) {
				t.Fatalf("%s %q:\n got %q\nwant %q", tx.Name, tx.Text, got, want[i])
			}
		}
	})
}

// splitAll applies every split stage of tok to s.
func splitAll(tok *Tokenizer, s string) []string {
	cur := []string{s}
	for _, sp := range tok.splitters {
		var next []string
		for _, c := range cur {
			next = append(next, pieces(c, sp.split(c, nil))...)
		}
		cur = next
	}
	return cur
}
