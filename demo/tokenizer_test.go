package demo

import (
	"strings"
	"testing"

	"github.com/dlclark/regexp2"

	"dflash/data/chat"
	"dflash/data/tokenizer"
	"dflash/internal/testseed"
)

// naiveEncode is the brute-force BPE encoder: split, then merge the
// lowest-ranked adjacent pair until none is left, per word.
func naiveEncode(t *testing.T, b *BPE, text string) []int32 {
	t.Helper()
	rank := map[[2]int32]int{}
	for i, m := range b.Merges {
		rank[m] = i
	}
	re := regexp2.MustCompile(SplitPattern, regexp2.Unicode)
	var out []int32
	for _, seg := range splitSpecials(b, text) {
		if id, ok := b.SpecialID(seg); ok {
			out = append(out, int32(id))
			continue
		}
		words, err := splitWords(re, seg)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range words {
			s := make([]int32, len(w))
			for i := 0; i < len(w); i++ {
				s[i] = int32(w[i])
			}
			for {
				best, bi := -1, -1
				for i := 0; i+1 < len(s); i++ {
					if r, ok := rank[[2]int32{s[i], s[i+1]}]; ok && (best < 0 || r < best) {
						best, bi = r, i
					}
				}
				if bi < 0 {
					break
				}
				s = append(append(s[:bi:bi], int32(256+best)), s[bi+2:]...)
			}
			out = append(out, s...)
		}
	}
	return out
}

// splitSpecials cuts text around special tokens, keeping them as pieces.
func splitSpecials(b *BPE, text string) []string {
	var out []string
	for text != "" {
		at, which := -1, ""
		for _, s := range b.Specials {
			if i := strings.Index(text, s); i >= 0 && (at < 0 || i < at) {
				at, which = i, s
			}
		}
		if at < 0 {
			out = append(out, text)
			break
		}
		if at > 0 {
			out = append(out, text[:at])
		}
		out = append(out, which)
		text = text[at+len(which):]
	}
	return out
}

// corpusTokenizer trains a BPE of vocab ids (with DemoSpecials) on maxBytes
// of the Go corpus, writes its tokenizer directory and loads that with
// package data/tokenizer. It returns the corpus texts, the BPE, the
// directory and the loaded tokenizer.
func corpusTokenizer(t *testing.T, maxBytes, vocab int) ([]string, *BPE, string, *tokenizer.Tokenizer) {
	t.Helper()
	docs, err := GoCorpus(CorpusOptions{MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, d := range docs {
		texts = append(texts, d.Text)
	}
	b, err := TrainBPE(texts, BPEOptions{VocabSize: vocab, Specials: DemoSpecials})
	if err != nil {
		t.Fatal(err)
	}
	if b.VocabSize() != vocab {
		t.Fatalf("vocab %d, want %d", b.VocabSize(), vocab)
	}
	dir := t.TempDir()
	if err := b.WriteTokenizerDir(dir); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatalf("data/tokenizer cannot load the demo tokenizer: %v", err)
	}
	return texts, b, dir, tok
}

func TestTokenizerRoundTripWithDataPackage(t *testing.T) {
	texts, b, _, tok := corpusTokenizer(t, 400<<10, 1024)
	if tok.VocabSize() != b.VocabSize() {
		t.Fatalf("loaded vocab %d, trained %d", tok.VocabSize(), b.VocabSize())
	}
	for _, s := range DemoSpecials {
		id, ok := tok.TokenID(s)
		want, _ := b.SpecialID(s)
		if !ok || int(id) != want || !tok.IsSpecial(id) {
			t.Fatalf("special %s: id %d ok %v special %v, want %d", s, id, ok, tok.IsSpecial(id), want)
		}
	}
	r := testseed.New(t)
	samples := []string{
		"<|im_start|>user\nfunc main() {\n\treturn nil\n}<|im_end|>\n<|im_start|>assistant\n",
		"héllo 世界 🙂 \t\t  x := 42\r\n", "<|MASK|><|MASK|>a<|endoftext|>",
	}
	for i := 0; i < 8; i++ {
		d := texts[r.IntN(len(texts))]
		a := r.IntN(len(d))
		e := min(len(d), a+r.IntN(2000))
		for a > 0 && !utf8Start(d[a]) {
			a--
		}
		for e < len(d) && !utf8Start(d[e]) {
			e++
		}
		samples = append(samples, d[a:e])
	}
	for i, s := range samples {
		got := tok.Encode(s)
		want := naiveEncode(t, b, s)
		if len(got) != len(want) {
			t.Fatalf("sample %d: %d ids from data/tokenizer, %d from the naive encoder", i, len(got), len(want))
		}
		for k := range got {
			if got[k] != want[k] {
				t.Fatalf("sample %d: id %d differs: %d vs %d", i, k, got[k], want[k])
			}
		}
		if back := tok.Decode(got, false); back != s {
			t.Fatalf("sample %d: decode(encode(x)) != x:\n%q\n%q", i, back, s)
		}
	}
}

func utf8Start(c byte) bool { return c&0xC0 != 0x80 }

func TestChatTemplateWithDataPackage(t *testing.T) {
	_, _, dir, tok := corpusTokenizer(t, 100<<10, 600)
	tmpl, err := chat.Load(dir, tok)
	if err != nil {
		t.Fatalf("data/chat cannot load the demo chat template: %v", err)
	}
	if tmpl.Family() != "chatml" {
		t.Fatalf("template family %q, want chatml", tmpl.Family())
	}
	msgs := []chat.Message{{Role: "user", Content: "func f() {"}, {Role: "assistant", Content: "\treturn 1\n}"}}
	text, _, err := tmpl.Render(msgs, chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>user\nfunc f() {<|im_end|>\n<|im_start|>assistant\n\treturn 1\n}<|im_end|>\n"
	if text != want {
		t.Fatalf("rendered %q, want %q", text, want)
	}
	ids, mask, err := tmpl.Encode(tok, msgs, chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var masked []int32
	for i, m := range mask {
		if m != 0 {
			masked = append(masked, ids[i])
		}
	}
	if got := tok.Decode(masked, false); got != "\treturn 1\n}<|im_end|>" {
		t.Fatalf("assistant-only tokens decode to %q", got)
	}
}
