package jsonl

import (
	"fmt"
	"unicode/utf8"
)

// checkUTF8 reports text that JSON decoding would silently replace with
// U+FFFD: bytes that are not UTF-8, and \u escapes of unpaired surrogates
// (a high surrogate not followed by a low one, or a lone low one).
func checkUTF8(text []byte) error {
	if !utf8.Valid(text) {
		i := 0
		for i < len(text) {
			r, n := utf8.DecodeRune(text[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return fmt.Errorf("byte %d (0x%02x) is not UTF-8", i, text[i])
	}
	for i := 0; i+1 < len(text); i++ {
		if text[i] != '\\' {
			continue
		}
		if text[i+1] != 'u' {
			i++ // an escaped character, possibly a backslash
			continue
		}
		r, ok := hex4(text, i+2)
		switch {
		case !ok || r < 0xD800 || r > 0xDFFF:
		case r >= 0xDC00:
			return fmt.Errorf(`byte %d: \u%04x is an unpaired low surrogate`, i, r)
		default:
			lo, ok := rune(0), i+12 <= len(text) && text[i+6] == '\\' && text[i+7] == 'u'
			if ok {
				lo, ok = hex4(text, i+8)
			}
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return fmt.Errorf(`byte %d: \u%04x is a high surrogate without its low half`, i, r)
			}
			i += 6
		}
		i++
	}
	return nil
}

// hex4 reads the four hex digits at text[i:].
func hex4(text []byte, i int) (rune, bool) {
	if i+4 > len(text) {
		return 0, false
	}
	var r rune
	for _, c := range text[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
