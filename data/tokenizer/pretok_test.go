package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"

	"dflash/internal/testseed"
)

// palette is the character mix random texts are drawn from: every class the
// split patterns distinguish, multi-byte letters, marks, numbers and spaces.
var palette = []string{
	"a", "b", "Z", "q", "e", "s", "S", "t", "T", "r", "R", "v", "l", "L", "m", "d", "D",
	"0", "7", "9", " ", " ", " ", " ", "\n", "\r", "\t", "\v", "\f",
	"'", "'", ".", ",", "!", "?", "-", "(", ")", "<", ">", "|", "\"", "/", "\\", "_", "#",
	"你", "好", "こ", "カ", "안", "Ж", "ω", "é", "ß", "ſ", "ǅ",
	"\u0301", "\u094d", "\u0e31", // combining marks (neither letter nor number)
	"²", "½", "٣", "Ⅻ", // numbers that are not ASCII digits
	"\u00a0", "\u3000", "\u2028", "\u0085", "\u2009", // non-ASCII white space
	"🤗", "👍🏽", "\u200d", "❤", "\ufe0f",
	"\xff", // invalid UTF-8
}

func randomText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(palette[rng.IntN(len(palette))])
	}
	return b.String()
}

// TestScannerMatchesRegexp2 checks the hand-written scanners against the
// patterns run by regexp2, an independent regex engine, on random texts.
func TestScannerMatchesRegexp2(t *testing.T) {
	rng := testseed.New(t)
	n := 3000
	if testing.Short() || raceEnabled {
		n = 400
	}
	for _, pat := range []string{patternGPT2, patternLlama3, patternQwen2} {
		t.Run(pat[:20], func(t *testing.T) {
			ref := &regexSplitter{re: regexp2.MustCompile(pat, regexp2.None)}
			fast := newScanner(pat)
			for i := 0; i < n; i++ {
				s := randomText(rng, 1+rng.IntN(40))
				// regexp2 sees U+FFFD where Go sees an invalid byte (both are
				// "other"), and it does not fold ſ to s under (?i), where
				// Oniguruma (HF) does: TestContractionFold covers that case.
				s = strings.ReplaceAll(s, "\xff", "?")
				s = strings.ReplaceAll(s, "'ſ", "'s")
				got := pieces(s, fast.split(s, nil))
				want := pieces(s, ref.split(s, nil))
				if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
					t.Fatalf("text %q:\nscanner %q\nregexp2 %q", s, got, want)
				}
			}
		})
	}
}

func pieces(s string, ends []int) []string {
	var out []string
	prev := 0
	for _, e := range ends {
		out = append(out, s[prev:e])
		prev = e
	}
	return out
}

func TestLiteralSplitter(t *testing.T) {
	for _, c := range []struct {
		sep, in string
		want    []string
	}{
		{"--", "a--b----c--", []string{"a", "--", "b", "--", "--", "c", "--"}},
		{"x", "x", []string{"x"}},
		{"x", "abc", []string{"abc"}},
	} {
		t.Run(c.in, func(t *testing.T) {
			got := pieces(c.in, literalSplitter(c.sep).split(c.in, nil))
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Fatalf("got %q want %q", got, c.want)
			}
		})
	}
}

// TestContractionFold checks the case-insensitive contractions of the
// Llama-3/Qwen2 patterns, including U+017F, which Unicode case folding maps
// to 's' (Oniguruma, which HF tokenizers uses, folds it).
func TestContractionFold(t *testing.T) {
	sc := newScanner(patternLlama3)
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"'Sup", []string{"'S", "up"}},
		{"'LLama", []string{"'LL", "ama"}},
		{"'rEx", []string{"'rE", "x"}},
		{"'ſtar", []string{"'ſ", "tar"}},
		{"'xyz", []string{"'xyz"}},
	} {
		got := pieces(c.in, sc.split(c.in, nil))
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%q: got %q want %q", c.in, got, c.want)
		}
	}
}
