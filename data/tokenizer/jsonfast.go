package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// A tokenizer.json is mostly its vocabulary and merges (hundreds of
// thousands of entries). Parse walks the file once with this small reader:
// it cuts the top level into raw values, decodes the small ones with
// encoding/json and streams the vocabulary and merges without building
// intermediate strings, several times faster than encoding/json alone.

type jsonReader struct {
	b   []byte
	i   int
	err error
}

func (r *jsonReader) fail(format string, a ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("offset %d: %s", r.i, fmt.Sprintf(format, a...))
	}
}

func (r *jsonReader) space() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end or after an error).
func (r *jsonReader) peek() byte {
	r.space()
	if r.i >= len(r.b) || r.err != nil {
		return 0
	}
	return r.b[r.i]
}

func (r *jsonReader) expect(c byte) {
	if r.peek() != c {
		r.fail("want %q", c)
		return
	}
	r.i++
}

// strBytes reads a JSON string; the result aliases the input unless the
// string holds escapes.
func (r *jsonReader) strBytes() []byte {
	if r.peek() != '"' {
		r.fail("want a string")
		return nil
	}
	start := r.i
	r.i++
	escaped := false
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case '\\':
			escaped = true
			r.i += 2
			continue
		case '"':
			r.i++
			if !escaped {
				return r.b[start+1 : r.i-1]
			}
			var s string
			if err := json.Unmarshal(r.b[start:r.i], &s); err != nil {
				r.fail("string: %v", err)
			}
			return []byte(s)
		}
		r.i++
	}
	r.fail("unterminated string")
	return nil
}

func (r *jsonReader) int() int64 {
	r.space()
	start := r.i
	for r.i < len(r.b) && (r.b[r.i] == '-' || (r.b[r.i] >= '0' && r.b[r.i] <= '9')) {
		r.i++
	}
	v, err := strconv.ParseInt(string(r.b[start:r.i]), 10, 32)
	if err != nil {
		r.fail("want an integer id")
	}
	return v
}

// value skips one JSON value and returns its bytes (not validated here:
// the small values go through encoding/json afterwards).
func (r *jsonReader) value() []byte {
	r.space()
	start := r.i
	depth := 0
	for r.i < len(r.b) && r.err == nil {
		switch c := r.b[r.i]; c {
		case '"':
			r.strBytes()
			if depth == 0 {
				return r.b[start:r.i]
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				r.fail("unbalanced %q", c)
				return nil
			}
			if depth == 0 {
				r.i++
				return r.b[start:r.i]
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return r.b[start:r.i]
			}
		}
		r.i++
	}
	if depth != 0 {
		r.fail("unterminated value")
	}
	return r.b[start:r.i]
}

// object calls member for each key of a JSON object; member must consume
// the value.
func (r *jsonReader) object(member func(key string)) {
	r.expect('{')
	if r.peek() == '}' {
		r.i++
		return
	}
	for r.err == nil {
		k := string(r.strBytes())
		r.expect(':')
		member(k)
		switch r.peek() {
		case ',':
			r.i++
		case '}':
			r.i++
			return
		default:
			r.fail("want ',' or '}'")
		}
	}
}

// list calls item for each element of a JSON array.
func (r *jsonReader) list(item func()) {
	r.expect('[')
	if r.peek() == ']' {
		r.i++
		return
	}
	for r.err == nil {
		item()
		switch r.peek() {
		case ',':
			r.i++
		case ']':
			r.i++
			return
		default:
			r.fail("want ',' or ']'")
		}
	}
}

// rawObject cuts a JSON object into its members' raw values.
func rawObject(b []byte, field string) (map[string]json.RawMessage, error) {
	r := &jsonReader{b: b}
	out := map[string]json.RawMessage{}
	r.object(func(k string) { out[k] = r.value() })
	if r.err == nil && r.peek() != 0 {
		r.fail("data after the object")
	}
	if r.err != nil {
		return nil, fmt.Errorf("%s: %w", field, r.err)
	}
	return out, nil
}

// readVocab streams {"token": id, ...} to entry.
func readVocab(b []byte, entry func(tok []byte, id int32) error) error {
	r := &jsonReader{b: b}
	r.object(func(k string) {
		if err := entry([]byte(k), int32(r.int())); err != nil && r.err == nil { // the key's escapes are decoded
			r.err = err
		}
	})
	if r.err != nil {
		return fmt.Errorf("model.vocab: %w", r.err)
	}
	return nil
}

// readMerges streams ["a b", ...] or [["a", "b"], ...] to merge, with the
// rank of each pair.
func readMerges(b []byte, merge func(rank int, a, b []byte) error) error {
	r := &jsonReader{b: b}
	rank := 0
	r.list(func() {
		var a, c []byte
		switch r.peek() {
		case '"':
			s := r.strBytes()
			k := -1
			for j, ch := range s {
				if ch == ' ' {
					if k >= 0 {
						k = -2
						break
					}
					k = j
				}
			}
			if k <= 0 || k == len(s)-1 {
				r.err = fmt.Errorf("[%d] %q: want two tokens separated by one space", rank, s)
				return
			}
			a, c = s[:k], s[k+1:]
		case '[':
			n := 0
			r.list(func() {
				s := r.strBytes()
				if n == 0 {
					a = s
				} else {
					c = s
				}
				n++
			})
			if n != 2 {
				r.err = fmt.Errorf("[%d]: want 2 tokens, got %d", rank, n)
				return
			}
		default:
			r.err = fmt.Errorf("[%d]: want a string or a pair", rank)
			return
		}
		if err := merge(rank, a, c); err != nil && r.err == nil {
			r.err = fmt.Errorf("[%d] %w", rank, err)
		}
		rank++
	})
	if r.err != nil {
		if strings.HasPrefix(r.err.Error(), "[") { // names the entry already
			return fmt.Errorf("model.merges%w", r.err)
		}
		return fmt.Errorf("model.merges: %w", r.err)
	}
	return nil
}
