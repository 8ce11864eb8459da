package tokenizer

import "unicode/utf8"

// byteToRune is the byte-level alphabet of GPT-2 style BPE: every byte maps to
// a printable rune. Printable Latin-1 bytes map to themselves; the other 68
// bytes map, in byte order, to U+0100 onwards.
var byteToRune [256]rune

// runeToByte inverts byteToRune: runeToByte[r] is the byte plus one, or 0
// for a rune outside the alphabet (all alphabet runes are below 0x180).
var runeToByte [0x180]uint16

func init() {
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = uint16(b) + 1
	}
}

// fromByteLevel maps a vocabulary entry written in the byte-level alphabet back
// to the raw bytes it stands for; ok is false when a rune lies outside the
// alphabet.
func fromByteLevel(s string) (raw string, ok bool) {
	var small [64]byte
	buf, ok := appendFromByteLevel(small[:0], []byte(s))
	return string(buf), ok
}

// appendFromByteLevel appends to buf the raw bytes of a byte-level string.
func appendFromByteLevel(buf, s []byte) ([]byte, bool) {
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if runeToByte[c] == 0 {
				return buf, false
			}
			buf = append(buf, c)
			i++
			continue
		}
		r, w := utf8.DecodeRune(s[i:])
		if r >= rune(len(runeToByte)) || runeToByte[r] == 0 {
			return buf, false
		}
		buf = append(buf, byte(runeToByte[r]-1))
		i += w
	}
	return buf, true
}

// toByteLevel writes raw bytes in the byte-level alphabet (the inverse of
// fromByteLevel).
func toByteLevel(raw string) string {
	buf := make([]byte, 0, 2*len(raw))
	for i := 0; i < len(raw); i++ {
		buf = utf8.AppendRune(buf, byteToRune[raw[i]])
	}
	return string(buf)
}
