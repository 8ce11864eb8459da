package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// head is the chatml marker pair every case needs to be accepted as a
// template family; it holds no expression.
const head = "<|im_start|><|im_end|>"

// TestUndefinedNames states by hand which names a template may read: those it
// binds itself, those dflash passes, the engine's globals, and guarded ones.
func TestUndefinedNames(t *testing.T) {
	vars := map[string]any{"eos_token": "<|im_end|>"}
	for _, c := range []struct {
		name, src string
		want      string // "": loads; else the error names this (name (line N), ...)
	}{
		// Refused: one per way a name is read.
		{"output", "{{ mesage }}", "mesage (line 1)"},
		{"subscript", "{% for message in messages %}{{ mesage['content'] }}{% endfor %}", "mesage (line 1)"},
		{"attribute base", "{{ mesage.content }}", "mesage (line 1)"},
		{"if", "\n\n{% if add_generation_promt %}x{% endif %}", "add_generation_promt (line 3)"},
		{"elif", "{% if messages %}{% elif foo %}{% endif %}", "foo (line 1)"},
		{"for iterable", "{% for m in mesages %}{% endfor %}", "mesages (line 1)"},
		{"for filter", "{% for m in messages if m.role == rol %}{% endfor %}", "rol (line 1)"},
		{"set value", "{% set x = y %}{{ x }}", "y (line 1)"},
		{"namespace base", "{% set ns.a = 1 %}", "ns (line 1)"},
		{"call argument", "{{ messages | join(sep) }}", "sep (line 1)"},
		{"keyword argument value", "{{ range(stop=n) }}", "n (line 1)"},
		{"macro default", "{% macro f(a=b) %}{{ a }}{% endmacro %}", "b (line 1)"},
		{"filter block argument", "{% filter indent(w) %}x{% endfilter %}", "w (line 1)"},
		{"dict and list literals", "{{ {'k': v} }}{{ [u] }}", "v (line 1), u (line 1)"},
		{"test argument", "{{ messages is sameas(other) }}", "other (line 1)"},
		{"guard on another name", "{% if x is defined %}{{ y }}{% endif %}", "y (line 1)"},
		{"guarded attribute is no guard", "{% if x.y is defined %}{% endif %}", "x (line 1)"},
		{"special token not in the config", "{{ bos_token }}", "bos_token (line 1)"},
		{"line inside a tag", "{{ messages +\n\n mesage }}", "mesage (line 3)"},
		{"line after strings and comments", "{# a\nb #}{{ 'c\nd' }}\n{{ zz }}", "zz (line 4)"},
		{"each name once, first line", "{{ a }}\n{{ b }}\n{{ a }}", "a (line 1), b (line 2)"},

		// Accepted.
		{"passed by dflash", "{{ messages }}{{ add_generation_prompt }}{{ enable_thinking }}{{ tools }}{{ documents }}{{ eos_token }}", ""},
		{"set", "{% set x = 1 %}{{ x }}", ""},
		{"set block", "{% set x %}y{% endset %}{{ x }}", ""},
		{"set before use not required", "{% for m in messages %}{{ last }}{% set last = m %}{% endfor %}", ""},
		{"namespace", "{% set ns = namespace(a=1) %}{% set ns.a = 2 %}{{ ns.a }}", ""},
		{"for variables and loop", "{% for k, v in messages %}{{ k }}{{ v }}{{ loop.index }}{% endfor %}", ""},
		{"for recursive", "{% for m in messages recursive %}{{ m }}{% endfor %}", ""},
		{"macro and parameters", "{% macro f(a, b=1) %}{{ a }}{{ b }}{{ caller() }}{% endmacro %}{% call f(2) %}x{% endcall %}", ""},
		{"call arguments", "{% macro f() %}{{ caller(1) }}{% endmacro %}{% call(item) f() %}{{ item }}{% endcall %}", ""},
		{"engine globals", "{{ range(3) }}{{ raise_exception('x') if false }}{{ strftime_now('%Y') }}{{ dict(a=1) }}{{ joiner() }}{{ cycler(1) }}", ""},
		{"literals and keywords", "{{ true and True or not false and none is None and null }}{{ 1 if 'a' in 'ab' else 2 }}", ""},
		{"attributes, filters, tests", "{{ messages[0].content.strip() | trim | length }}{{ messages is not iterable }}{{ messages is divisibleby(2) }}", ""},
		{"keyword argument names", "{{ messages | tojson(indent=2, separators=x) if x is defined }}", ""},
		{"is defined", "{% if x is defined %}{{ x }}{% endif %}", ""},
		{"is not defined", "{% if not x is defined %}{% set y = 1 %}{% endif %}{% if x is not defined %}{% endif %}", ""},
		{"is undefined", "{{ x if x is not undefined }}", ""},
		{"default", "{{ x | default('a') }}{{ y|d }}", ""},
		{"filter block", "{% filter upper %}x{% endfilter %}", ""},
		{"raw", "{% raw %}{{ anything }}{% endraw %}", ""},
		{"comment", "{# {{ anything }} #}", ""},
		{"generation", "{% generation %}{{ messages }}{% endgeneration %}", ""},
		{"strings hold no names", "{{ 'mesage' + \"a }} b\" + 'it\\'s x' }}", ""},
		{"trim markers", "{%- for m in messages -%}{{- m -}}{%- endfor -%}", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(head+c.src, vars)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("loaded; want an error naming %s", c.want)
			}
			if !strings.Contains(err.Error(), "undefined") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %q, want it to name %s", err, c.want)
			}
		})
	}
}

// TestRealTemplatesNames loads every real template at hand, and refuses each
// with the message variable of one expression misspelt, naming its line.
func TestRealTemplatesNames(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(cacheDir, "*"))
	if len(dirs) == 0 {
		t.Skipf("%s is missing: run scripts/fetch-testdata.sh first", cacheDir)
	}
	use := regexp.MustCompile(`\bmessage(\.content|\['content'\])`)
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			tmpl, err := Load(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			src := tmpl.Source()
			loc := use.FindStringIndex(src)
			if loc == nil {
				t.Fatalf("no message.content in the template")
			}
			line := 1 + strings.Count(src[:loc[0]], "\n")
			bad := src[:loc[0]] + "mesage" + src[loc[0]+len("message"):]

			b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			cfg["chat_template"] = bad
			out := t.TempDir()
			b, _ = json.Marshal(cfg)
			if err := os.WriteFile(filepath.Join(out, "tokenizer_config.json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = Load(out, nil)
			want := filepath.Join(out, "tokenizer_config.json") + ": chat_template: undefined variable mesage (line " + strconv.Itoa(line) + ")"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want it to contain %q", err, want)
			}
			if err := os.WriteFile(filepath.Join(out, "chat_template.jinja"), []byte(bad), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = Load(out, nil)
			want = filepath.Join(out, "chat_template.jinja") + ": undefined variable mesage (line " + strconv.Itoa(line) + ")"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want it to contain %q", err, want)
			}
		})
	}
}
