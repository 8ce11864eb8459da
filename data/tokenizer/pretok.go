package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// The split patterns that run on hand-written scanners.
const (
	// patternGPT2 is the GPT-2 pattern, also used by ByteLevel with use_regex.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// patternLlama3 is the Llama-3 (cl100k-like) pattern: numbers in runs of up to 3.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternQwen2 is the Qwen2/Qwen3 pattern: like Llama-3 but single digits.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitter cuts text into pre-tokens ("Isolated": matches and the gaps
// between them are pieces of their own).
type splitter interface {
	// split appends to dst the end offsets of the non-empty pieces of s, in
	// order; the last one appended is len(s) (nothing is appended for "").
	split(s string, dst []int) []int
}

// newSplitter returns the fast scanner for a known pattern, a regexp2
// splitter for any other regex, or a literal splitter.
func newSplitter(p *patternJSON) (splitter, error) {
	switch {
	case p.Regex != nil:
		switch *p.Regex {
		case patternGPT2, patternLlama3, patternQwen2:
			return newScanner(*p.Regex), nil
		}
		re, err := regexp2.Compile(*p.Regex, regexp2.None)
		if err != nil {
			return nil, fmt.Errorf("Regex %q: %w", *p.Regex, err)
		}
		return &regexSplitter{re: re}, nil
	case p.String != nil:
		if *p.String == "" {
			return nil, fmt.Errorf("String is empty")
		}
		return literalSplitter(*p.String), nil
	}
	return nil, fmt.Errorf("neither Regex nor String is set")
}

// Character classes of the split patterns.
const (
	clsOther   uint8 = iota // not a letter, number or white space: [^\s\p{L}\p{N}]
	clsLetter               // \p{L}
	clsNumber               // \p{N}
	clsSpace                // \s other than \r and \n
	clsNewline              // \r or \n
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for c := 0; c < utf8.RuneSelf; c++ {
		asciiClass[c] = runeClass(rune(c))
	}
}

func runeClass(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther // also invalid UTF-8 (utf8.RuneError)
}

// classAt returns the class and byte width of the character at s[i].
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return runeClass(r), w
}

// scanClass returns the end of the run of class cls starting at i.
func scanClass(s string, i int, cls uint8) int {
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if asciiClass[c] != cls {
				return i
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if runeClass(r) != cls {
			return i
		}
		i += w
	}
	return i
}

// scanNewlines returns the end of the run of \r and \n starting at i.
func scanNewlines(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// scanner is the hand-written matcher of patternGPT2, patternLlama3 and
// patternQwen2. It returns exactly the pieces the regex gives (tested against
// regexp2 and against HF tokenizers).
type scanner struct {
	gpt2   bool
	digits int // longest run of \p{N} in one piece (llama3: 3, qwen2: 1)
}

func newScanner(pattern string) *scanner {
	switch pattern {
	case patternGPT2:
		return &scanner{gpt2: true}
	case patternLlama3:
		return &scanner{digits: 3}
	case patternQwen2:
		return &scanner{digits: 1}
	}
	panic("tokenizer: no scanner for pattern " + pattern)
}

func (p *scanner) split(s string, dst []int) []int {
	if p.gpt2 {
		for i := 0; i < len(s); {
			i = p.nextGPT2(s, i)
			dst = append(dst, i)
		}
		return dst
	}
	for i := 0; i < len(s); {
		i = p.nextLlama(s, i)
		dst = append(dst, i)
	}
	return dst
}

// contraction returns the length of 's 't 're 've 'm 'll 'd after the
// apostrophe at s[i-1], or 0; fold makes it case-insensitive.
func contraction(s string, i int, fold bool) int {
	if i >= len(s) {
		return 0
	}
	c := s[i]
	if fold && c >= 'A' && c <= 'Z' {
		c += 'a' - 'A'
	}
	switch c {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v', 'l':
		if i+1 >= len(s) {
			return 0
		}
		c2 := s[i+1]
		if fold && c2 >= 'A' && c2 <= 'Z' {
			c2 += 'a' - 'A'
		}
		if (c == 'l' && c2 == 'l') || (c != 'l' && c2 == 'e') {
			return 2
		}
	}
	if fold && strings.HasPrefix(s[i:], "ſ") { // U+017F folds to 's'
		return len("ſ")
	}
	return 0
}

// nextLlama returns the end of the piece that starts at i for the Llama-3
// and Qwen2 patterns; the comments name the alternative that matches.
func (p *scanner) nextLlama(s string, i int) int {
	if s[i] == '\'' {
		if n := contraction(s, i+1, true); n > 0 { // (?i:'s|'t|'re|'ve|'m|'ll|'d)
			return i + 1 + n
		}
	}
	c, w := classAt(s, i)
	switch c {
	case clsLetter: // [^\r\n\p{L}\p{N}]?\p{L}+ without the prefix
		return scanClass(s, i+w, clsLetter)
	case clsNumber: // \p{N}{1,digits}
		j := i + w
		for k := 1; k < p.digits && j < len(s); k++ {
			c2, w2 := classAt(s, j)
			if c2 != clsNumber {
				break
			}
			j += w2
		}
		return j
	case clsOther, clsSpace:
		if i+w < len(s) {
			if c2, w2 := classAt(s, i+w); c2 == clsLetter { // [^\r\n\p{L}\p{N}]\p{L}+
				return scanClass(s, i+w+w2, clsLetter)
			}
		}
		if c == clsOther { // [^\s\p{L}\p{N}]+[\r\n]*
			return scanNewlines(s, scanClass(s, i+w, clsOther))
		}
		if s[i] == ' ' && i+1 < len(s) {
			if c2, w2 := classAt(s, i+1); c2 == clsOther { // ' '[^\s\p{L}\p{N}]+[\r\n]*
				return scanNewlines(s, scanClass(s, i+1+w2, clsOther))
			}
		}
	}
	// White space: \s*[\r\n]+ | \s+(?!\S) | \s+
	j, lastNL, lastStart := i, -1, i
	for j < len(s) {
		c2, w2 := classAt(s, j)
		if c2 == clsNewline {
			lastNL = j
		} else if c2 != clsSpace {
			break
		}
		lastStart = j
		j += w2
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1
	case j == len(s) || lastStart == i:
		return j
	}
	return lastStart
}

// nextGPT2 returns the end of the piece that starts at i for patternGPT2.
func (p *scanner) nextGPT2(s string, i int) int {
	if s[i] == '\'' {
		if n := contraction(s, i+1, false); n > 0 {
			return i + 1 + n
		}
	}
	start := i
	if s[i] == ' ' && i+1 < len(s) { // ' ?' before a letter, number or other run
		if c2, _ := classAt(s, i+1); c2 == clsLetter || c2 == clsNumber || c2 == clsOther {
			start = i + 1
		}
	}
	if c, w := classAt(s, start); c == clsLetter || c == clsNumber || c == clsOther {
		return scanClass(s, start+w, c)
	}
	// \s+(?!\S) | \s+
	j, lastStart := i, i
	for j < len(s) {
		c2, w2 := classAt(s, j)
		if c2 != clsSpace && c2 != clsNewline {
			break
		}
		lastStart = j
		j += w2
	}
	if j == len(s) || lastStart == i {
		return j
	}
	return lastStart
}

// regexSplitter splits with any regex that regexp2 compiles (slow path).
type regexSplitter struct{ re *regexp2.Regexp }

func (r *regexSplitter) split(s string, dst []int) []int {
	// regexp2 reports rune indices; map them to byte offsets.
	runeOff := make([]int, 0, len(s)+1)
	for i := range s {
		runeOff = append(runeOff, i)
	}
	runeOff = append(runeOff, len(s))
	prev := 0
	m, err := r.re.FindStringMatch(s)
	for ; m != nil && err == nil; m, err = r.re.FindNextMatch(m) {
		start, end := runeOff[m.Index], runeOff[m.Index+m.Length]
		if start > prev {
			dst = append(dst, start)
		}
		if end > start {
			dst = append(dst, end)
		}
		prev = end
	}
	if err != nil {
		panic("tokenizer: regexp2 failed without a timeout set: " + err.Error())
	}
	if prev < len(s) {
		dst = append(dst, len(s))
	}
	return dst
}

// literalSplitter isolates every occurrence of a fixed string.
type literalSplitter string

func (l literalSplitter) split(s string, dst []int) []int {
	sep := string(l)
	prev := 0
	for {
		k := strings.Index(s[prev:], sep)
		if k < 0 {
			break
		}
		if k > 0 {
			dst = append(dst, prev+k)
		}
		prev += k + len(sep)
		dst = append(dst, prev)
	}
	if prev < len(s) {
		dst = append(dst, len(s))
	}
	return dst
}
