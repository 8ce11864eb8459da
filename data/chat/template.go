package chat

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"

	"dflash/data/tokenizer"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"` // system, user, assistant or tool
	Content string `json:"content"`
	// ReasoningContent is an assistant's thinking, when given apart from
	// Content (nil: not given).
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

// Options are the rendering switches of apply_chat_template.
type Options struct {
	// AddGenerationPrompt appends the assistant header (for inference).
	AddGenerationPrompt bool
	// EnableThinking is Qwen3's thinking switch; see the mask rule.
	EnableThinking bool
}

// family is a known turn layout.
type family struct {
	name       string
	markers    []string // all present in the template source
	header     string   // assistant header H
	eot        string   // end of turn E
	emptyThink string   // empty thinking block, when the template uses <think>
}

var families = []family{
	{name: "chatml", markers: []string{"<|im_start|>", "<|im_end|>"}, header: "<|im_start|>assistant\n", eot: "<|im_end|>", emptyThink: "<think>\n\n</think>\n\n"},
	{name: "llama3", markers: []string{"<|start_header_id|>", "<|eot_id|>"}, header: "<|start_header_id|>assistant<|end_header_id|>\n\n", eot: "<|eot_id|>"},
}

// Template is a compiled chat template with its turn layout.
type Template struct {
	source string
	path   string // where it came from, for messages
	tmpl   *jinja.Template
	fam    family
	vars   map[string]any // special tokens handed to the template
}

// Family names the turn layout (chatml or llama3).
func (t *Template) Family() string { return t.fam.name }

// Source is the Jinja text of the template.
func (t *Template) Source() string { return t.source }

// LoadModel reads the tokenizer (tokenizer.LoadDir) and the chat template
// (Load) of the model directory dir.
func LoadModel(dir string) (*tokenizer.Tokenizer, *Template, error) {
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := Load(dir, tok)
	if err != nil {
		return nil, nil, err
	}
	return tok, tmpl, nil
}

// Load reads the chat template of a model directory: chat_template.jinja
// when present, else tokenizer_config.json's chat_template (a string, or a
// list of named templates of which "default" is used). tok, when not nil,
// must hold the end-of-turn marker as one token.
func Load(dir string, tok *tokenizer.Tokenizer) (*Template, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("chat template: %s: %w", cfgPath, err)
	}
	vars := map[string]any{}
	for _, k := range []string{"bos_token", "eos_token", "unk_token", "pad_token"} {
		if v, ok := specialToken(cfg[k]); ok {
			vars[k] = v
		}
	}
	src, path := "", cfgPath
	if jb, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		src, path = string(jb), filepath.Join(dir, "chat_template.jinja")
	} else if raw, ok := cfg["chat_template"]; ok {
		if src, err = templateString(raw); err != nil {
			return nil, fmt.Errorf("chat template: %s: chat_template: %w", cfgPath, err)
		}
	} else {
		return nil, fmt.Errorf("chat template: %s has no chat_template and %s has no chat_template.jinja", cfgPath, dir)
	}
	t, err := New(src, vars)
	if err != nil {
		where := path
		if path == cfgPath {
			where += ": chat_template" // lines count from the field's first
		}
		return nil, fmt.Errorf("chat template: %s: %w", where, err)
	}
	t.path = path
	if tok != nil {
		if _, ok := tok.TokenID(t.fam.eot); !ok {
			return nil, fmt.Errorf("chat template: %s: end-of-turn marker %q is not a token of the tokenizer", path, t.fam.eot)
		}
	}
	return t, nil
}

// New compiles a template source; vars are extra template variables (the
// special tokens bos_token, eos_token...). A variable the template reads
// that neither it, dflash nor Jinja defines is an error naming it and its
// line (see checkNames).
func New(source string, vars map[string]any) (*Template, error) {
	fam, ok := detect(source)
	if !ok {
		return nil, fmt.Errorf("unknown turn markers: dflash knows chatml (<|im_start|> ... <|im_end|>) and llama3 (<|start_header_id|> ... <|eot_id|>) templates")
	}
	if !strings.Contains(source, "<think>") {
		fam.emptyThink = ""
	}
	tmpl, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("cannot compile the Jinja template: %w", err)
	}
	t := &Template{source: source, tmpl: tmpl, fam: fam, vars: vars}
	if err := checkNames(source, slices.Collect(maps.Keys(t.data(nil, Options{})))); err != nil {
		return nil, err
	}
	return t, nil
}

func detect(src string) (family, bool) {
	for _, f := range families {
		all := true
		for _, m := range f.markers {
			all = all && strings.Contains(src, m)
		}
		if all {
			return f, true
		}
	}
	return family{}, false
}

// specialToken reads a special token given as a string or {"content": ...}.
func specialToken(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Content != nil {
		return *obj.Content, true
	}
	return "", false
}

// templateString reads chat_template: a string or [{"name","template"}].
func templateString(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", fmt.Errorf("want a string or a list of {name, template}: %w", err)
	}
	var names []string
	for _, e := range list {
		if e.Name == "default" {
			return e.Template, nil
		}
		names = append(names, e.Name)
	}
	return "", fmt.Errorf("no template named \"default\" (have %q)", names)
}
