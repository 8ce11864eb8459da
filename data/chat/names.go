package chat

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/ardanlabs/jinja"
)

// The Jinja engine renders a name nothing defines as empty and has no strict
// mode, so a misspelt variable would silently blank part of every sample.
// checkNames finds such names in the source before any rendering: a name the
// template reads is accepted when
//
//   - the template binds it somewhere ({% set %}, a for-loop variable, a macro
//     or its parameters, {% call(args) %}; loop and caller where a for or a
//     macro binds them), wherever the binding stands;
//   - dflash passes it (passed: Render's variables);
//   - the engine defines it (range, namespace, raise_exception...);
//   - the template guards it somewhere: `x is defined`, `x is not defined`,
//     `x is undefined`, `x | default(...)`, `x | d`.
//
// Attributes (message.contnet) are not checked: a message lacks optional keys
// (tool_calls, reasoning_content) by design, and the engine gives no way to
// tell a miss from a typo at render time.

// exprToken is a token of a Jinja expression.
type exprToken struct {
	kind byte // 'n' name, 's' string, '0' number, else the punctuation's first byte
	text string
	line int
}

// nameUse is a name read at a line.
type nameUse struct {
	name string
	line int
}

// keywords are names the expression grammar itself reads.
var keywords = map[string]bool{
	"and": true, "or": true, "not": true, "in": true, "is": true, "if": true, "else": true,
	"recursive": true, "true": true, "false": true, "none": true, "null": true,
	"True": true, "False": true, "None": true,
}

// checkNames returns an error naming each variable src reads that nothing
// defines, with the line of its first use.
func checkNames(src string, passed []string) error {
	var n nameScan
	n.bound = map[string]bool{}
	n.guarded = map[string]bool{}
	raw := false
	for _, tag := range tags(src) {
		toks := lexExpr(tag.text, tag.line)
		if tag.kind == '%' && len(toks) > 0 {
			kw := toks[0].text
			if raw {
				raw = kw != "endraw"
				continue
			}
			raw = kw == "raw"
			n.statement(kw, toks[1:])
		} else if tag.kind == '{' && !raw {
			n.reads(toks)
		}
	}
	var bad []string
	seen := map[string]bool{}
	for _, u := range n.uses {
		if seen[u.name] {
			continue
		}
		seen[u.name] = true
		if !n.bound[u.name] && !n.guarded[u.name] && !slices.Contains(passed, u.name) && !engineGlobal(u.name) {
			bad = append(bad, fmt.Sprintf("%s (line %d)", u.name, u.line))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sorted := slices.Clone(passed)
	sort.Strings(sorted)
	what := "undefined variable"
	if len(bad) > 1 {
		what += "s"
	}
	return fmt.Errorf("%s %s (not set by the template, not passed by dflash, which passes %s, and not defined by Jinja; guard an optional variable with `is defined` or `| default(...)`)",
		what, strings.Join(bad, ", "), strings.Join(sorted, ", "))
}

// engineGlobal reports whether the Jinja engine defines name with no data.
func engineGlobal(name string) bool {
	t, err := jinja.Compile("{{ " + name + " is defined }}")
	if err != nil {
		return false
	}
	out, err := t.Render(nil)
	return err == nil && out == "True"
}

// nameScan collects the names a template binds, guards and reads.
type nameScan struct {
	bound, guarded map[string]bool
	uses           []nameUse
}

// statement records the bindings and reads of {% kw toks %}.
func (n *nameScan) statement(kw string, toks []exprToken) {
	switch kw {
	case "if", "elif":
		n.reads(toks)
	case "for":
		in := slices.IndexFunc(toks, func(t exprToken) bool { return t.kind == 'n' && t.text == "in" })
		if in < 0 {
			return
		}
		n.bind(toks[:in])
		n.bound["loop"] = true
		n.reads(toks[in+1:])
	case "set":
		eq := slices.IndexFunc(toks, func(t exprToken) bool { return t.text == "=" })
		if eq < 0 {
			n.bind(toks) // {% set x %}...{% endset %}
			return
		}
		if eq >= 2 && toks[1].text == "." {
			n.reads(toks[:1]) // {% set ns.attr = v %} reads ns
		} else {
			n.bind(toks[:eq])
		}
		n.reads(toks[eq+1:])
	case "macro":
		n.bound["caller"] = true
		n.bound["varargs"] = true
		n.bound["kwargs"] = true
		n.params(toks)
	case "call":
		if len(toks) > 0 && toks[0].text == "(" {
			end := slices.IndexFunc(toks, func(t exprToken) bool { return t.text == ")" })
			if end < 0 {
				return
			}
			n.bind(toks[:end])
			toks = toks[end+1:]
		}
		n.reads(toks)
	case "filter":
		if len(toks) > 0 {
			n.reads(toks[1:]) // toks[0] names the filter
		}
	}
}

// bind records every name of toks as bound.
func (n *nameScan) bind(toks []exprToken) {
	for _, t := range toks {
		if t.kind == 'n' {
			n.bound[t.text] = true
		}
	}
}

// params binds a macro's name and parameters and reads their defaults:
// toks is `name ( p1 , p2 = default ... )`.
func (n *nameScan) params(toks []exprToken) {
	var rest []exprToken
	for i, t := range toks {
		prev := byte(0)
		if i > 0 {
			prev = toks[i-1].kind
		}
		if t.kind == 'n' && (i == 0 || prev == '(' || prev == ',') {
			n.bound[t.text] = true
			t = exprToken{kind: ',', text: ","}
		}
		rest = append(rest, t)
	}
	n.reads(rest)
}

// reads records the variables an expression reads and the guards it holds.
func (n *nameScan) reads(toks []exprToken) {
	at := func(i int) string {
		if i < 0 || i >= len(toks) {
			return ""
		}
		return toks[i].text
	}
	for i, t := range toks {
		if t.kind != 'n' || keywords[t.text] {
			continue
		}
		switch {
		case at(i-1) == "." || at(i-1) == "|": // attribute, filter
			continue
		case at(i-1) == "is" || at(i-1) == "not" && at(i-2) == "is": // test
			continue
		case at(i+1) == "=": // keyword argument
			continue
		}
		test := at(i + 2)
		if at(i+1) == "is" && test == "not" {
			test = at(i + 3)
		}
		if at(i+1) == "is" && (test == "defined" || test == "undefined") ||
			at(i+1) == "|" && (at(i+2) == "default" || at(i+2) == "d") {
			n.guarded[t.text] = true
		}
		n.uses = append(n.uses, nameUse{t.text, t.line})
	}
}

// tag is the inside of {{ }}, {% %} or {# #} (kind '{', '%' or '#'), trim
// markers removed, with the line it starts on.
type tag struct {
	kind byte
	text string
	line int
}

// tags splits src into its tags as the engine does: quotes inside {{ }} and
// {% %} hide closers.
func tags(src string) []tag {
	var out []tag
	line := 1
	for i := 0; i < len(src); {
		if src[i] != '{' || i+1 == len(src) || !strings.ContainsRune("{%#", rune(src[i+1])) {
			if src[i] == '\n' {
				line++
			}
			i++
			continue
		}
		kind := src[i+1]
		closer := "}}"
		if kind != '{' {
			closer = string(kind) + "}"
		}
		start, j := i+2, i+2
		for j < len(src) && !strings.HasPrefix(src[j:], closer) {
			if q := src[j]; kind != '#' && (q == '\'' || q == '"') {
				for j++; j < len(src) && src[j] != q; j++ {
					if src[j] == '\\' {
						j++
					}
				}
			}
			j++
		}
		end := min(j, len(src))
		text := strings.TrimSuffix(strings.TrimPrefix(src[start:end], "-"), "-")
		out = append(out, tag{kind: kind, text: text, line: line})
		line += strings.Count(src[i:end], "\n")
		i = end + len(closer)
	}
	return out
}

// lexExpr splits a tag's text into tokens; line is the line it starts on.
func lexExpr(s string, line int) []exprToken {
	var out []exprToken
	for i := 0; i < len(s); {
		c := s[i]
		start := i
		switch {
		case c == '\n':
			line++
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r':
			i++
			continue
		case c == '\'' || c == '"':
			for i++; i < len(s) && s[i] != c; i++ {
				if s[i] == '\\' {
					i++
				}
			}
			i++
			out = append(out, exprToken{kind: 's', line: line})
			line += strings.Count(s[start:min(i, len(s))], "\n")
			continue
		case c >= '0' && c <= '9':
			for i < len(s) && (isIdentByte(s[i]) || s[i] == '.') {
				i++
			}
			out = append(out, exprToken{kind: '0', text: s[start:i], line: line})
			continue
		case isIdentByte(c):
			for i < len(s) && isIdentByte(s[i]) {
				i++
			}
			out = append(out, exprToken{kind: 'n', text: s[start:i], line: line})
			continue
		}
		i++
		if i < len(s) && slices.Contains([]string{"==", "!=", "<=", ">=", "**", "//"}, s[start:i+1]) {
			i++
		}
		out = append(out, exprToken{kind: c, text: s[start:i], line: line})
	}
	return out
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
