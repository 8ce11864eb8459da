package dflash

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"dflash/data/tokenizer"
	"dflash/internal/testseed"
)

// byteLevelVocab returns tokenizer.json's model.vocab for the 256 bytes in
// GPT-2's byte-level alphabet (printable bytes stand for themselves, the
// others for 256+n in byte order), id = byte.
func byteLevelVocab() map[string]int {
	vocab := map[string]int{}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	return vocab
}

// testTokenizer parses a byte-level tokenizer.json with the 256 byte tokens
// and the added tokens given (content → id); it returns the tokenizer and
// the vocabulary as the file spells it (name → id), the reference for names.
func testTokenizer(t *testing.T, added map[string]int) (*tokenizer.Tokenizer, map[string]int) {
	t.Helper()
	vocab := byteLevelVocab()
	var list []any
	names := map[string]int{}
	for k, v := range vocab {
		names[k] = v
	}
	for content, id := range added {
		list = append(list, map[string]any{"id": id, "content": content, "special": true, "normalized": false})
		names[content] = id
	}
	b, _ := json.Marshal(map[string]any{
		"version": "1.0", "added_tokens": list,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": []any{}, "ignore_merges": false,
			"continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false},
	})
	tok, err := tokenizer.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return tok, names
}

// nameOf returns the name names (tokenizer.json's spelling) gives id.
func nameOf(names map[string]int, id int) string {
	for k, v := range names {
		if v == id {
			return k
		}
	}
	return ""
}

func TestMaskTokenName(t *testing.T) {
	withMask, wn := testTokenizer(t, map[string]int{"<|endoftext|>": 256, "<|MASK|>": 257})
	without, won := testTokenizer(t, map[string]int{"<|endoftext|>": 256})
	for _, c := range []struct {
		name    string
		tok     *tokenizer.Tokenizer
		id      int
		want    string // the name; "" when an error is wanted
		wantErr string
	}{
		{"the tokenizer's <|MASK|>", withMask, 257, nameOf(wn, 257), ""},
		{"another id beside <|MASK|>", withMask, 5, "", "mask token id 5: the target's tokenizer has <|MASK|> at id 257"},
		{"another added token beside <|MASK|>", withMask, 256, "", "mask token id 256: the target's tokenizer has <|MASK|> at id 257"},
		{"an added token", without, 256, nameOf(won, 256), ""},
		{"a byte token in the byte-level alphabet", without, ' ', nameOf(won, ' '), ""},
		{"a control byte", without, 0, nameOf(won, 0), ""},
		{"past the tokenizer", without, 257, DefaultMaskToken, ""},
		{"past the tokenizer with a gap", without, 300, DefaultMaskToken, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := MaskTokenName(c.tok, c.id)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("name %q, error %v; want an error containing %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("name %q, error %v; want %q", got, err, c.want)
			}
		})
	}
}

// engineKeys lists, per serving engine, the config.json keys its DFlash
// loader reads (dotted: dflash_config.x), from the public code:
//   - z-lab: dflash/model.py DFlashDraftModel.__init__ (config.block_size,
//     config.num_target_layers evaluated eagerly, dflash_config.get of the taps
//     and mask id, layer_types[i] and sliding_window per layer) and
//     transformers' Qwen3Config / Qwen3RotaryEmbedding.
//   - SGLang: srt/models/dflash.py (sizes, get_rope_config, layer_types),
//     srt/speculative/dflash_utils.py parse_dflash_draft_config (block_size,
//     num_target_layers, target_layer_ids, mask_token, mask_token_id) and
//     dflash_worker.py _resolve_mask_token_id (mask_token against the tokenizer).
//   - vLLM: model_executor/models/qwen3_dflash.py (sizes, rope_parameters from
//     rope_theta/rope_scaling, layer_types, dflash_config.causal), eagle3_utils
//     get_eagle3_aux_layers_from_config (eagle_aux_hidden_state_layer_ids, read
//     alone by some builds) and the parallel-drafting mask id.
var engineKeys = map[string][]string{
	"z-lab": {"architectures", "model_type", "block_size", "num_target_layers", "dflash_config.target_layer_ids",
		"dflash_config.mask_token_id", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
		"num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling",
		"max_position_embeddings", "vocab_size", "attention_bias", "attention_dropout", "layer_types", "sliding_window"},
	"SGLang": {"architectures", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
		"num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling",
		"max_position_embeddings", "attention_bias", "layer_types", "block_size", "dflash_config.block_size",
		"num_target_layers", "dflash_config.target_layer_ids", "dflash_config.mask_token", "dflash_config.mask_token_id"},
	"vLLM": {"architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
		"num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps", "rope_theta",
		"rope_scaling", "max_position_embeddings", "vocab_size", "layer_types", "eagle_aux_hidden_state_layer_ids",
		"dflash_config.target_layer_ids", "dflash_config.mask_token_id", "dflash_config.causal"},
}

// nullable are keys whose value may be null: present, meaning "none".
var nullable = map[string]bool{"rope_scaling": true, "sliding_window": true}

// TestExportHasEngineKeys exports a drafter (Export, with a tokenizer) and
// checks, in the config.json written, every key each engine reads, and the
// values that tie them together.
func TestExportHasEngineKeys(t *testing.T) {
	seed := testseed.Seed(t)
	tok, names := testTokenizer(t, map[string]int{"<|endoftext|>": 256, "<|MASK|>": 257})
	c := testConfig()
	c.VocabSize, c.Target.VocabSize, c.MaskTokenID = 300, 300, 257
	d := New[float32](c, rand.New(rand.NewPCG(seed, 1)))
	dir := filepath.Join(t.TempDir(), "drafter")
	if err := d.Export(dir, "BF16", tok); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	lookup := func(key string) (any, bool) {
		var v any = cfg
		for _, part := range strings.Split(key, ".") {
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			if v, ok = m[part]; !ok {
				return nil, false
			}
		}
		return v, true
	}
	for engine, keys := range engineKeys {
		for _, k := range keys {
			v, ok := lookup(k)
			if !ok || (v == nil && !nullable[k]) {
				t.Errorf("%s reads %s: the export has %v (present %v)", engine, k, v, ok)
			}
		}
	}
	ints := func(key string) []int {
		v, _ := lookup(key)
		var out []int
		for _, x := range v.([]any) {
			out = append(out, int(x.(float64)))
		}
		return out
	}
	dc := cfg["dflash_config"].(map[string]any)
	for _, check := range []struct {
		what string
		ok   bool
	}{
		{"architectures [DFlashDraftModel]", slices.Equal(cfg["architectures"].([]any), []any{"DFlashDraftModel"})},
		{"model_type qwen3", cfg["model_type"] == "qwen3"},
		{"eagle_aux_hidden_state_layer_ids = target_layer_ids + 1", slices.Equal(ints("eagle_aux_hidden_state_layer_ids"), []int{2, 4}) &&
			slices.Equal(ints("dflash_config.target_layer_ids"), c.TargetLayerIDs)},
		{"block_size top and in dflash_config", cfg["block_size"] == float64(c.BlockSize) && dc["block_size"] == float64(c.BlockSize)},
		{"num_target_layers", cfg["num_target_layers"] == float64(c.NumTargetLayers)},
		{"mask_token names mask_token_id in the tokenizer", dc["mask_token_id"] == 257.0 && names[dc["mask_token"].(string)] == 257},
		{"causal false", dc["causal"] == false},
		{"rope_scaling null for plain RoPE", cfg["rope_scaling"] == nil},
		{"a full_attention layer_types entry per layer", slices.Equal(cfg["layer_types"].([]any), []any{"full_attention", "full_attention"})},
		{"torch_dtype of the weights", cfg["torch_dtype"] == "bfloat16"},
	} {
		if !check.ok {
			t.Errorf("%s: config.json\n%s", check.what, raw)
		}
	}

	// A mask id that disagrees with the tokenizer's <|MASK|> is refused, naming both ids.
	c2 := *c
	c2.MaskTokenID = 256
	d2 := New[float32](&c2, rand.New(rand.NewPCG(seed, 2)))
	err = d2.Export(filepath.Join(t.TempDir(), "d2"), "F32", tok)
	if err == nil || !strings.Contains(err.Error(), "mask token id 256") || !strings.Contains(err.Error(), "at id 257") {
		t.Fatalf("export with mask 256: %v, want an error naming ids 256 and 257", err)
	}
}

func TestWarnTaps(t *testing.T) {
	for _, c := range []struct {
		taps   []int
		layers int
		warn   bool
	}{
		{[]int{1, 9, 17, 25, 33}, 36, false},
		{DefaultTaps(4, 2), 4, false},
		{[]int{0, 2}, 3, true},
		{[]int{35}, 36, true},
		{[]int{34}, 36, false},
	} {
		var buf bytes.Buffer
		got := WarnTaps(slog.New(slog.NewTextHandler(&buf, nil)), c.taps, c.layers)
		logged := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "32204")
		if got != c.warn || logged != c.warn {
			t.Errorf("taps %v of %d layers: warned %v, logged %q; want %v", c.taps, c.layers, got, buf.String(), c.warn)
		}
	}
}
