package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"

	"dflash/internal/testseed"
)

// trainMerges learns n merges from corpus the textbook way (most frequent
// adjacent pair first), on byte-level strings. It only has to produce a
// plausible merge table for the tests.
func trainMerges(corpus []string, n int) [][2]string {
	words := map[string]int{}
	for _, w := range corpus {
		words[toByteLevel(w)]++
	}
	split := map[string][]string{}
	for w := range words {
		for _, r := range w {
			split[w] = append(split[w], string(r))
		}
	}
	var merges [][2]string
	for len(merges) < n {
		counts := map[[2]string]int{}
		for w, c := range words {
			s := split[w]
			for i := 0; i+1 < len(s); i++ {
				counts[[2]string{s[i], s[i+1]}] += c
			}
		}
		var best [2]string
		bestN := 0
		for p, c := range counts {
			if c > bestN || (c == bestN && p[0]+"\x00"+p[1] < best[0]+"\x00"+best[1]) {
				best, bestN = p, c
			}
		}
		if bestN == 0 {
			break
		}
		merges = append(merges, best)
		for w, s := range split {
			var out []string
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, s[i]+s[i+1])
					i++
				} else {
					out = append(out, s[i])
				}
			}
			split[w] = out
		}
	}
	return merges
}

// toyJSON returns a small tokenizer.json (as a map to mutate) with the
// Qwen2 split pattern, NFC and merges learnt from a toy corpus.
func toyJSON(ignoreMerges bool) map[string]any {
	corpus := strings.Fields("the then there these theme thing think thinking in inn inner ing ring string sing " +
		"token tokens tokenizer tokenise merge merges merging aaaa aaaaaaaa hello world 你好 世界 你们")
	for i := range corpus {
		corpus = append(corpus, " "+corpus[i])
	}
	corpus = append(corpus, "    ", "\n\n", "  ")
	merges := trainMerges(corpus, 150)
	vocab := map[string]any{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = len(vocab)
	}
	var ms []any
	for _, m := range merges {
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = len(vocab)
		}
		ms = append(ms, []any{m[0], m[1]})
	}
	if ignoreMerges {
		vocab["xyzzy"] = len(vocab) // reachable only as a whole piece
	}
	n := len(vocab)
	return map[string]any{
		"version":    "1.0",
		"truncation": nil, "padding": nil,
		"added_tokens": []any{
			map[string]any{"id": n, "content": "<|end|>", "special": true, "normalized": false},
			map[string]any{"id": n + 1, "content": "<|end|>x", "special": true, "normalized": false},
			map[string]any{"id": n + 2, "content": "<t>", "special": false, "normalized": false},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patternQwen2}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": ignoreMerges,
			"vocab": vocab, "merges": ms},
	}
}

func mustParse(t testing.TB, m map[string]any) *Tokenizer {
	t.Helper()
	b, _ := json.Marshal(m)
	tok, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// refEncode is a deliberately naive reference: split with regexp2, then per
// piece merge the lowest-ranked adjacent pair of strings until none is left.
func refEncode(t *testing.T, m map[string]any, text string) []int32 {
	model := m["model"].(map[string]any)
	vocab := model["vocab"].(map[string]any)
	rank := map[string]int{}
	for i, p := range model["merges"].([]any) {
		pp := p.([]any)
		k := pp[0].(string) + "\x00" + pp[1].(string)
		if _, ok := rank[k]; !ok {
			rank[k] = i
		}
	}
	text = norm.NFC.String(text)
	re := regexp2.MustCompile(patternQwen2, regexp2.None)
	var out []int32
	encodePiece := func(p string) {
		if model["ignore_merges"].(bool) {
			if id, ok := vocab[toByteLevel(p)]; ok {
				out = append(out, int32(toInt(id)))
				return
			}
		}
		var syms []string
		for i := 0; i < len(p); i++ {
			syms = append(syms, string(byteToRune[p[i]]))
		}
		for {
			best, bestRank := -1, 1<<30
			for i := 0; i+1 < len(syms); i++ {
				if r, ok := rank[syms[i]+"\x00"+syms[i+1]]; ok && r < bestRank {
					best, bestRank = i, r
				}
			}
			if best < 0 {
				break
			}
			syms = append(syms[:best], append([]string{syms[best] + syms[best+1]}, syms[best+2:]...)...)
		}
		for _, s := range syms {
			out = append(out, int32(toInt(vocab[s])))
		}
	}
	for _, seg := range splitAdded(text) {
		if seg.id >= 0 {
			out = append(out, seg.id)
			continue
		}
		pieces := pieces(seg.text, (&regexSplitter{re}).split(seg.text, nil))
		for _, p := range pieces {
			encodePiece(p)
		}
	}
	return out
}

func toInt(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case float64:
		return int(x)
	}
	panic("not a number")
}

type seg struct {
	text string
	id   int32
}

// splitAdded cuts text at the toy added tokens, longest first.
func splitAdded(text string) []seg {
	var out []seg
	toks := []struct {
		s  string
		id int32
	}{{"<|end|>x", toyAddedBase + 1}, {"<|end|>", toyAddedBase}, {"<t>", toyAddedBase + 2}}
	for len(text) > 0 {
		best, bestTok := len(text), -1
		for k, tk := range toks {
			if i := strings.Index(text, tk.s); i >= 0 && (i < best || (i == best && bestTok >= 0 && len(tk.s) > len(toks[bestTok].s))) {
				best, bestTok = i, k
			}
		}
		if best > 0 {
			out = append(out, seg{text[:best], -1})
		}
		if bestTok < 0 {
			break
		}
		out = append(out, seg{"", toks[bestTok].id})
		text = text[best+len(toks[bestTok].s):]
	}
	return out
}

// toyAddedBase is the id of the first added token of the toy tokenizer.
var toyAddedBase int32

var toyPalette = []string{"the", "then", " thinking", "ing", "in", "token", " merges", "a", "aaaa", " ", "  ", "\n", "\n\n",
	"你好", "世界", "<|end|>", "<|end|>x", "<t>", "<|end", "e\u0301", "é", "'s", "'LL", "42", ".", "!", "\t", "🤗", "ſ", "x", "xyzzy", " xyzzy"}

func TestEncodeMatchesReference(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		m := toyJSON(ignore)
		tok := mustParse(t, m)
		toyAddedBase = int32(len(m["model"].(map[string]any)["vocab"].(map[string]any)))
		if id, ok := tok.TokenID("xyzzy"); ignore && (!ok || !slices.Equal(tok.Encode("xyzzy"), []int32{id})) {
			t.Fatalf("ignore_merges: xyzzy is not one token")
		}
		t.Logf("ignore_merges %v", ignore)
		rng := testseed.New(t)
		for i := 0; i < 500; i++ {
			var b strings.Builder
			for k := rng.IntN(30); k >= 0; k-- {
				b.WriteString(toyPalette[rng.IntN(len(toyPalette))])
			}
			text := b.String()
			got := tok.Encode(text)
			want := refEncode(t, m, text)
			if !slices.Equal(got, want) {
				t.Fatalf("text %q:\n got %v\nwant %v", text, got, want)
			}
			if d := tok.Decode(got, false); d != norm.NFC.String(text) {
				t.Fatalf("round trip %q -> %q", text, d)
			}
		}
	}
}

// TestLinearAndHeapAgree runs both merge loops on random byte strings.
func TestLinearAndHeapAgree(t *testing.T) {
	tok := loadCached(t, "qwen3")
	rng := testseed.New(t)
	e := tok.getEncoder()
	words := []string{"ing", "the", "tion", "aaaa", "  ", "你好", "🤗", "er", "s"}
	for i := 0; i < 2000; i++ {
		var b strings.Builder
		for k := 1 + rng.IntN(12); k > 0; k-- {
			b.WriteString(words[rng.IntN(len(words))])
		}
		w := b.String()
		if len(w) < 2 {
			continue
		}
		lin := tok.bpe(e, w, nil)
		hp := tok.bpeHeap(e, w, nil)
		if !slices.Equal(lin, hp) {
			t.Fatalf("%q: linear %v heap %v", w, lin, hp)
		}
	}
}

func TestRoundTripAndOffsets(t *testing.T) {
	seed := testseed.Seed(t)
	for _, name := range []string{"qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			tok := loadCached(t, name)
			rng := rand.New(rand.NewPCG(seed, 4))
			for i := 0; i < 300; i++ {
				text := randomText(rng, 1+rng.IntN(60))
				ids, starts := tok.EncodeOffsets(text)
				if !slices.Equal(ids, tok.Encode(text)) {
					t.Fatalf("EncodeOffsets ids differ from Encode for %q", text)
				}
				want := text
				if tok.NFC() {
					want = norm.NFC.String(text)
				}
				if d := tok.Decode(ids, false); d != want {
					t.Fatalf("decode(encode(%q)) = %q", text, d)
				}
				if want != text {
					continue // offsets then point at normalisation segments
				}
				for k := range ids {
					end := len(text)
					if k+1 < len(ids) {
						end = int(starts[k+1])
					}
					if s, _ := tok.Token(ids[k]); text[starts[k]:end] != s {
						t.Fatalf("%q: token %d %q at [%d,%d) covers %q", text, k, s, starts[k], end, text[starts[k]:end])
					}
				}
			}
		})
	}
}

func TestNFCOffsets(t *testing.T) {
	tok := mustParse(t, toyJSON(false))
	text := "ab e\u0301 cd"
	ids, starts := tok.EncodeOffsets(text)
	if d := tok.Decode(ids, false); d != norm.NFC.String(text) {
		t.Fatalf("decode %q", d)
	}
	for k, s := range starts {
		if s < 0 || int(s) > len(text) || (k > 0 && s < starts[k-1]) {
			t.Fatalf("starts %v not monotone within the original text", starts)
		}
	}
	if last := starts[len(starts)-1]; text[last:] != "d" && text[last:] != "cd" && text[last:] != " cd" {
		t.Fatalf("last token starts at %d (%q)", last, text[last:])
	}
}

// TestRegexFallback checks that an unrecognised pattern runs on regexp2 and
// gives the same ids as the scanner for an equivalent pattern.
func TestRegexFallback(t *testing.T) {
	fast := mustParse(t, toyJSON(false))
	m := toyJSON(false)
	split := m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)
	split["pattern"] = map[string]any{"Regex": "(?:" + patternQwen2 + ")"}
	slow := mustParse(t, m)
	if _, ok := slow.splitters[0].(*regexSplitter); !ok {
		t.Fatalf("splitter %T, want the regexp2 one", slow.splitters[0])
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < 200; i++ {
		var b strings.Builder
		for k := rng.IntN(20); k >= 0; k-- {
			b.WriteString(toyPalette[rng.IntN(len(toyPalette))])
		}
		text := strings.ReplaceAll(b.String(), "'ſ", "'s")
		if !slices.Equal(fast.Encode(text), slow.Encode(text)) {
			t.Fatalf("%q: scanner %v regexp2 %v", text, fast.Encode(text), slow.Encode(text))
		}
	}
}

func TestAddedTokens(t *testing.T) {
	m := toyJSON(false)
	tok := mustParse(t, m)
	base := int32(len(m["model"].(map[string]any)["vocab"].(map[string]any)))
	ids := tok.Encode("a<|end|>x<|end|><t><|end")
	want := []int32{tok.byteID['a'], base + 1, base, base + 2}
	if !slices.Equal(ids[:4], want) {
		t.Fatalf("got %v, want prefix %v", ids, want)
	}
	if tok.Decode(ids, true) != "a<t><|end" {
		t.Fatalf("skip special: %q", tok.Decode(ids, true))
	}
	if id, ok := tok.TokenID("<|end|>"); !ok || id != base || !tok.IsSpecial(id) || tok.IsSpecial(base+2) {
		t.Fatalf("TokenID/IsSpecial wrong")
	}
}

func TestUnsupported(t *testing.T) {
	set := func(path string, v any) func(map[string]any) {
		return func(m map[string]any) {
			keys := strings.Split(path, ".")
			cur := m
			for _, k := range keys[:len(keys)-1] {
				cur = cur[k].(map[string]any)
			}
			cur[keys[len(keys)-1]] = v
		}
	}
	for _, c := range []struct {
		name   string
		mutate func(map[string]any)
		want   string
	}{
		{"wordpiece", set("model.type", "WordPiece"), `model.type "WordPiece"`},
		{"dropout", set("model.dropout", 0.1), "model.dropout"},
		{"byte fallback", set("model.byte_fallback", true), "model.byte_fallback"},
		{"suffix", set("model.end_of_word_suffix", "</w>"), "model.end_of_word_suffix"},
		{"prefix", set("model.continuing_subword_prefix", "##"), "model.continuing_subword_prefix"},
		{"lowercase", set("normalizer", map[string]any{"type": "Lowercase"}), `normalizer.type "Lowercase"`},
		{"nfkc in sequence", set("normalizer", map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFKC"}}}), "normalizer.normalizers[0].type"},
		{"metaspace", set("pre_tokenizer", map[string]any{"type": "Metaspace"}), `pre_tokenizer.type "Metaspace"`},
		{"no bytelevel", set("pre_tokenizer", map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "Isolated"}), "no ByteLevel"},
		{"prefix space", set("pre_tokenizer", map[string]any{"type": "ByteLevel", "add_prefix_space": true}), "add_prefix_space"},
		{"split removed", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["behavior"] = "Removed"
		}, `pre_tokenizer.pretokenizers[0].behavior "Removed"`},
		{"split invert", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["invert"] = true
		}, "pre_tokenizer.pretokenizers[0].invert"},
		{"bad regex", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": "(unclosed"}
		}, "pre_tokenizer.pretokenizers[0].pattern"},
		{"wordpiece decoder", set("decoder", map[string]any{"type": "WordPiece"}), `decoder.type "WordPiece"`},
		{"null decoder", set("decoder", nil), "decoder is null"},
		{"bert post", set("post_processor", map[string]any{"type": "BertProcessing"}), `post_processor.type "BertProcessing"`},
		{"truncation", set("truncation", map[string]any{"max_length": 5}), "truncation"},
		{"padding", set("padding", map[string]any{"length": 5}), "padding"},
		{"lstrip", func(m map[string]any) { m["added_tokens"].([]any)[0].(map[string]any)["lstrip"] = true }, `added_tokens[0] ("<|end|>").lstrip`},
		{"single word", func(m map[string]any) { m["added_tokens"].([]any)[1].(map[string]any)["single_word"] = true }, "added_tokens[1]"},
		{"missing byte", func(m map[string]any) {
			delete(m["model"].(map[string]any)["vocab"].(map[string]any), string(byteToRune[0]))
		}, "no token for byte 0x00"},
		{"bad merge", func(m map[string]any) {
			model := m["model"].(map[string]any)
			model["merges"] = append(model["merges"].([]any), []any{"zz", "qq"})
		}, "model.merges["},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := toyJSON(false)
			c.mutate(m)
			b, _ := json.Marshal(m)
			_, err := Parse(b)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestMergesAsStrings loads merges written as "a b" (the Llama-3 file's form).
func TestMergesAsStrings(t *testing.T) {
	m := toyJSON(false)
	a := mustParse(t, m)
	model := m["model"].(map[string]any)
	var strs []any
	for _, p := range model["merges"].([]any) {
		pp := p.([]any)
		strs = append(strs, pp[0].(string)+" "+pp[1].(string))
	}
	model["merges"] = strs
	b := mustParse(t, m)
	text := "the thinking tokenizer merges aaaaaaaa 你好世界"
	if !slices.Equal(a.Encode(text), b.Encode(text)) {
		t.Fatal("merge forms disagree")
	}
}

func TestByteLevelAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for b := 0; b < 256; b++ {
		r := byteToRune[b]
		if seen[r] {
			t.Fatalf("rune %U used twice", r)
		}
		seen[r] = true
	}
	var all []byte
	for b := 0; b < 256; b++ {
		all = append(all, byte(b))
	}
	if back, ok := fromByteLevel(toByteLevel(string(all))); !ok || back != string(all) {
		t.Fatal("byte-level mapping does not round-trip")
	}
	// Known anchors of the GPT-2 alphabet: space is Ġ, newline is Ċ.
	if byteToRune[' '] != 'Ġ' || byteToRune['\n'] != 'Ċ' || byteToRune['a'] != 'a' {
		t.Fatal("alphabet anchors wrong")
	}
}

// TestPairTable checks the merge table against a Go map on random keys.
func TestPairTable(t *testing.T) {
	rng := testseed.New(t)
	ref := map[uint64]uint64{}
	p := newPairTable(5000)
	for i := 0; i < 5000; i++ {
		k := pairKey(rng.Int32N(3000), rng.Int32N(3000))
		v := rng.Uint64()
		if _, ok := ref[k]; !ok {
			ref[k] = v
		}
		p.putFirst(k, v)
	}
	for i := 0; i < 20000; i++ {
		k := pairKey(rng.Int32N(3000), rng.Int32N(3000))
		v, ok := p.get(k)
		w, wok := ref[k]
		if ok != wok || v != w {
			t.Fatalf("key %x: table (%d, %v), map (%d, %v)", k, v, ok, w, wok)
		}
	}
}

// TestSplitStages runs two split stages (a literal, then the Qwen2 regex):
// the ids must be those of encoding each literal piece on its own.
func TestSplitStages(t *testing.T) {
	single := mustParse(t, toyJSON(false))
	m := toyJSON(false)
	pre := m["pre_tokenizer"].(map[string]any)
	pre["pretokenizers"] = append([]any{map[string]any{"type": "Split", "pattern": map[string]any{"String": "in"}, "behavior": "Isolated"}},
		pre["pretokenizers"].([]any)...)
	multi := mustParse(t, m)
	if len(multi.splitters) != 2 {
		t.Fatalf("%d split stages, want 2", len(multi.splitters))
	}
	rng := rand.New(rand.NewPCG(8, 8))
	for i := 0; i < 300; i++ {
		var b strings.Builder
		for k := rng.IntN(20); k >= 0; k-- {
			if p := toyPalette[rng.IntN(len(toyPalette))]; !strings.Contains(p, "<") && !strings.Contains(p, "\u0301") {
				b.WriteString(p)
			}
		}
		text := b.String()
		var want []int32
		for _, p := range pieces(text, literalSplitter("in").split(text, nil)) {
			want = append(want, single.Encode(p)...)
		}
		if got := multi.Encode(text); !slices.Equal(got, want) {
			t.Fatalf("%q: got %v want %v", text, got, want)
		}
	}
}
