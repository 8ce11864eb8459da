package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Special tokens of the demo tokenizer, in id order after the merges.
const (
	TokEndOfText = "<|endoftext|>"
	TokImStart   = "<|im_start|>"
	TokImEnd     = "<|im_end|>"
	TokMask      = "<|MASK|>"
)

// DemoSpecials lists the demo tokenizer's special tokens in id order.
var DemoSpecials = []string{TokEndOfText, TokImStart, TokImEnd, TokMask}

// ChatTemplate is the demo tokenizer's chat template (ChatML): every message
// is `<|im_start|>ROLE\nCONTENT<|im_end|>\n`; add_generation_prompt appends
// `<|im_start|>assistant\n`.
const ChatTemplate = "{%- for message in messages %}" +
	"{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}" +
	"{%- endfor %}" +
	"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"

// byteToUnicode is the byte-level alphabet of GPT-2 style tokenizers:
// printable Latin-1 bytes stand for themselves, the others map to U+0100 on.
var byteToUnicode = func() [256]rune {
	var m [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}()

// byteLevel maps raw bytes to their byte-level string.
func byteLevel(raw string) string {
	var sb bytes.Buffer
	for i := 0; i < len(raw); i++ {
		sb.WriteRune(byteToUnicode[raw[i]])
	}
	return sb.String()
}

// TokenizerJSON returns the HF tokenizer.json of b: NFC normaliser, the
// SplitPattern split then ByteLevel pre-tokenizer, BPE model with merges as
// pairs, ByteLevel decoder, and the special tokens as added tokens.
func (b *BPE) TokenizerJSON() ([]byte, error) {
	bl := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	var added []map[string]any
	for i, s := range b.Specials {
		added = append(added, map[string]any{
			"id": len(b.Tokens) + i, "content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true,
		})
	}
	// The vocab is written in id order (encoding/json would sort the keys).
	var vocab bytes.Buffer
	vocab.WriteByte('{')
	seen := map[string]bool{}
	for id, raw := range b.Tokens {
		key := byteLevel(raw)
		if seen[key] {
			return nil, fmt.Errorf("bpe: token %d (%q) appears twice", id, raw)
		}
		seen[key] = true
		if id > 0 {
			vocab.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		fmt.Fprintf(&vocab, "%s:%d", k, id)
	}
	vocab.WriteByte('}')
	merges := make([][2]string, len(b.Merges))
	for i, m := range b.Merges {
		merges[i] = [2]string{byteLevel(b.Tokens[m[0]]), byteLevel(b.Tokens[m[1]])}
	}
	doc := map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": SplitPattern}, "behavior": "Isolated", "invert": false},
			bl,
		}},
		"post_processor": bl,
		"decoder":        bl,
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": json.RawMessage(vocab.Bytes()), "merges": merges,
		},
	}
	return json.MarshalIndent(doc, "", " ")
}

// TokenizerConfigJSON returns tokenizer_config.json: the chat template, the
// special tokens (eos <|im_end|>, pad <|endoftext|>, mask <|MASK|>) and
// their added-token records.
func (b *BPE) TokenizerConfigJSON() ([]byte, error) {
	dec := map[string]any{}
	for i, s := range b.Specials {
		dec[fmt.Sprint(len(b.Tokens)+i)] = map[string]any{
			"content": s, "single_word": false, "lstrip": false, "rstrip": false,
			"normalized": false, "special": true,
		}
	}
	cfg := map[string]any{
		"add_bos_token":                false,
		"add_prefix_space":             false,
		"added_tokens_decoder":         dec,
		"additional_special_tokens":    []string{TokImStart, TokImEnd},
		"bos_token":                    nil,
		"chat_template":                ChatTemplate,
		"clean_up_tokenization_spaces": false,
		"eos_token":                    TokImEnd,
		"errors":                       "replace",
		"mask_token":                   TokMask,
		"model_max_length":             32768,
		"pad_token":                    TokEndOfText,
		"split_special_tokens":         false,
		"tokenizer_class":              "Qwen2Tokenizer",
		"unk_token":                    nil,
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// WriteTokenizerDir writes tokenizer.json and tokenizer_config.json of b
// into dir (created if needed).
func (b *BPE) WriteTokenizerDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tj, err := b.TokenizerJSON()
	if err != nil {
		return err
	}
	tc, err := b.TokenizerConfigJSON()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), tc, 0o644)
}
