package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"dflash/data/tokenizer"
)

// The golden texts, ids and masks come from HF transformers'
// apply_chat_template on the GPU machine (masks: from HF offsets by the rule
// in the package doc); regenerate with scripts/golden_tokenizers.py and copy
// its chat_golden.json here as testdata/golden.json.

var cacheDir = filepath.Join("..", "..", "testdata-cache", "tokenizers")

// loadModel returns the tokenizer and template of a fetched model
// directory, skipping the test when testdata-cache is missing.
func loadModel(t *testing.T, name string) (*tokenizer.Tokenizer, *Template) {
	t.Helper()
	if m, ok := models.Load(name); ok {
		p := m.([2]any)
		return p[0].(*tokenizer.Tokenizer), p[1].(*Template)
	}
	dir := filepath.Join(cacheDir, name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Skipf("%s is missing: run scripts/fetch-testdata.sh first", dir)
	}
	tok, tmpl, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	models.Store(name, [2]any{tok, tmpl})
	return tok, tmpl
}

var models sync.Map // name -> [tokenizer, template]

type convFile struct {
	Conversations []struct {
		Name     string    `json:"name"`
		Messages []Message `json:"messages"`
	} `json:"conversations"`
	Cases []struct {
		Name                string `json:"name"`
		Conversation        string `json:"conversation"`
		EnableThinking      bool   `json:"enable_thinking"`
		AddGenerationPrompt bool   `json:"add_generation_prompt"`
	} `json:"cases"`
}

type chatGolden struct {
	Version string `json:"transformers_version"`
	Cases   map[string][]struct {
		Case string  `json:"case"`
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
		Mask []uint8 `json:"mask"`
	} `json:"cases"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestGoldenChat(t *testing.T) {
	var conv convFile
	var gold chatGolden
	readJSON(t, filepath.Join("testdata", "conversations.json"), &conv)
	readJSON(t, filepath.Join("testdata", "golden.json"), &gold)
	msgs := map[string][]Message{}
	for _, c := range conv.Conversations {
		msgs[c.Name] = c.Messages
	}
	for _, name := range []string{"qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			tok, tmpl := loadModel(t, name)
			want := gold.Cases[name]
			if len(want) != len(conv.Cases) {
				t.Fatalf("golden has %d cases, conversations.json %d", len(want), len(conv.Cases))
			}
			for i, c := range conv.Cases {
				t.Run(c.Name, func(t *testing.T) {
					w := want[i]
					if w.Case != c.Name {
						t.Fatalf("golden case %q, want %q", w.Case, c.Name)
					}
					opts := Options{EnableThinking: c.EnableThinking, AddGenerationPrompt: c.AddGenerationPrompt}
					text, _, err := tmpl.Render(msgs[c.Conversation], opts)
					if err != nil {
						t.Fatal(err)
					}
					if text != w.Text {
						t.Fatalf("text differs from HF %s:\n got %q\nwant %q", gold.Version, text, w.Text)
					}
					ids, mask, err := tmpl.Encode(tok, msgs[c.Conversation], opts)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(ids, w.IDs) {
						t.Fatalf("ids differ:\n got %v\nwant %v", ids, w.IDs)
					}
					if !reflect.DeepEqual(mask, w.Mask) {
						t.Fatalf("mask differs:\n got %v\nwant %v", mask, w.Mask)
					}
					if n := sum(mask); n == 0 && !c.AddGenerationPrompt {
						t.Fatalf("no supervised token")
					}
				})
			}
		})
	}
}

func sum(m []uint8) int {
	n := 0
	for _, v := range m {
		n += int(v)
	}
	return n
}
