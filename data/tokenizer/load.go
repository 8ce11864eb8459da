package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/text/unicode/norm"
)

// fileJSON is the part of tokenizer.json that dflash reads.
type fileJSON struct {
	Truncation    json.RawMessage
	Padding       json.RawMessage
	AddedTokens   []addedJSON
	Normalizer    json.RawMessage
	PreTokenizer  json.RawMessage
	PostProcessor json.RawMessage
	Decoder       json.RawMessage
	Model         modelJSON
}

// parseFile cuts tokenizer.json into its parts; only the small ones go
// through encoding/json.
func parseFile(b []byte) (*fileJSON, error) {
	top, err := rawObject(b, "tokenizer.json")
	if err != nil {
		return nil, err
	}
	f := &fileJSON{Truncation: top["truncation"], Padding: top["padding"], Normalizer: top["normalizer"],
		PreTokenizer: top["pre_tokenizer"], PostProcessor: top["post_processor"], Decoder: top["decoder"]}
	if raw := top["added_tokens"]; !isNull(raw) {
		if err := json.Unmarshal(raw, &f.AddedTokens); err != nil {
			return nil, fmt.Errorf("added_tokens: %w", err)
		}
	}
	if isNull(top["model"]) {
		return nil, fmt.Errorf("model is missing")
	}
	model, err := rawObject(top["model"], "model")
	if err != nil {
		return nil, err
	}
	f.Model.Vocab, f.Model.Merges = model["vocab"], model["merges"]
	delete(model, "vocab")
	delete(model, "merges")
	small, err := json.Marshal(model)
	if err == nil {
		err = json.Unmarshal(small, &f.Model)
	}
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return f, nil
}

type addedJSON struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"-"`
	Merges                  json.RawMessage `json:"-"`
}

// stepJSON is one normalizer, pre-tokenizer, decoder or post-processor entry.
type stepJSON struct {
	Type           string            `json:"type"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	Pattern        *patternJSON      `json:"pattern"`
	Normalizers    []json.RawMessage `json:"normalizers"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	Decoders       []json.RawMessage `json:"decoders"`
	Processors     []json.RawMessage `json:"processors"`
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// LoadDir loads dir/tokenizer.json.
func LoadDir(dir string) (*Tokenizer, error) {
	return LoadFile(filepath.Join(dir, "tokenizer.json"))
}

// LoadFile loads a tokenizer.json file. Features dflash does not implement
// are an error naming the field.
func LoadFile(path string) (*Tokenizer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// Parse builds a Tokenizer from the bytes of a tokenizer.json file.
func Parse(b []byte) (*Tokenizer, error) {
	f, err := parseFile(b)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	t := &Tokenizer{hash: hex.EncodeToString(sum[:])}
	if !isNull(f.Truncation) {
		return nil, fmt.Errorf("truncation is set; dflash does not truncate inside the tokenizer (set it to null; use the max-length options instead)")
	}
	if !isNull(f.Padding) {
		return nil, fmt.Errorf("padding is set; dflash does not pad inside the tokenizer (set it to null)")
	}
	if t.nfc, err = parseNormalizer(f.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	if t.splitters, err = parsePreTokenizer(f.PreTokenizer, "pre_tokenizer"); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder, "decoder"); err != nil {
		return nil, err
	}
	if err := checkPostProcessor(f.PostProcessor, "post_processor"); err != nil {
		return nil, err
	}
	if err := t.loadModel(&f.Model); err != nil {
		return nil, err
	}
	if err := t.loadAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	t.states = make(chan *encoder, 64)
	return t, nil
}

func isNull(m json.RawMessage) bool {
	m = bytes.TrimSpace(m)
	return len(m) == 0 || string(m) == "null"
}

func parseStep(m json.RawMessage, field string) (stepJSON, error) {
	var s stepJSON
	if err := json.Unmarshal(m, &s); err != nil {
		return s, fmt.Errorf("%s: %w", field, err)
	}
	return s, nil
}

// parseNormalizer reports whether NFC is asked for.
func parseNormalizer(m json.RawMessage, field string) (nfc bool, err error) {
	if isNull(m) {
		return false, nil
	}
	s, err := parseStep(m, field)
	if err != nil {
		return false, err
	}
	switch s.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		for i, sub := range s.Normalizers {
			n, err := parseNormalizer(sub, fmt.Sprintf("%s.normalizers[%d]", field, i))
			if err != nil {
				return false, err
			}
			nfc = nfc || n
		}
		return nfc, nil
	}
	return false, fmt.Errorf("%s.type %q is not supported (supported: NFC, Sequence of NFC)", field, s.Type)
}

// parsePreTokenizer returns the split stages; it requires a ByteLevel step.
func parsePreTokenizer(m json.RawMessage, field string) ([]splitter, error) {
	if isNull(m) {
		return nil, fmt.Errorf("%s is null; dflash supports byte-level BPE only (a ByteLevel pre-tokenizer)", field)
	}
	var stages []splitter
	byteLevel := false
	var walk func(m json.RawMessage, field string) error
	walk = func(m json.RawMessage, field string) error {
		s, err := parseStep(m, field)
		if err != nil {
			return err
		}
		if byteLevel {
			return fmt.Errorf("%s: step %q after ByteLevel is not supported", field, s.Type)
		}
		switch s.Type {
		case "Sequence":
			for i, sub := range s.Pretokenizers {
				if err := walk(sub, fmt.Sprintf("%s.pretokenizers[%d]", field, i)); err != nil {
					return err
				}
			}
			return nil
		case "ByteLevel":
			if s.AddPrefixSpace {
				return fmt.Errorf("%s.add_prefix_space true is not supported", field)
			}
			if s.UseRegex == nil || *s.UseRegex {
				stages = append(stages, newScanner(patternGPT2))
			}
			byteLevel = true
			return nil
		case "Split":
			if s.Behavior != "Isolated" {
				return fmt.Errorf("%s.behavior %q is not supported (supported: Isolated)", field, s.Behavior)
			}
			if s.Invert {
				return fmt.Errorf("%s.invert true is not supported", field)
			}
			if s.Pattern == nil {
				return fmt.Errorf("%s.pattern is missing", field)
			}
			sp, err := newSplitter(s.Pattern)
			if err != nil {
				return fmt.Errorf("%s.pattern: %w", field, err)
			}
			stages = append(stages, sp)
			return nil
		}
		return fmt.Errorf("%s.type %q is not supported (supported: Sequence, Split, ByteLevel)", field, s.Type)
	}
	if err := walk(m, field); err != nil {
		return nil, err
	}
	if !byteLevel {
		return nil, fmt.Errorf("%s has no ByteLevel step; dflash supports byte-level BPE only", field)
	}
	return stages, nil
}

func checkDecoder(m json.RawMessage, field string) error {
	if isNull(m) {
		return fmt.Errorf("%s is null; dflash needs the ByteLevel decoder", field)
	}
	s, err := parseStep(m, field)
	if err != nil {
		return err
	}
	switch s.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		if len(s.Decoders) == 0 {
			return fmt.Errorf("%s.decoders is empty", field)
		}
		for i, sub := range s.Decoders {
			if err := checkDecoder(sub, fmt.Sprintf("%s.decoders[%d]", field, i)); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s.type %q is not supported (supported: ByteLevel)", field, s.Type)
}

func checkPostProcessor(m json.RawMessage, field string) error {
	if isNull(m) {
		return nil
	}
	s, err := parseStep(m, field)
	if err != nil {
		return err
	}
	switch s.Type {
	case "ByteLevel", "TemplateProcessing":
		return nil
	case "Sequence":
		for i, sub := range s.Processors {
			if err := checkPostProcessor(sub, fmt.Sprintf("%s.processors[%d]", field, i)); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s.type %q is not supported (supported: ByteLevel, TemplateProcessing)", field, s.Type)
}

func (t *Tokenizer) loadModel(m *modelJSON) error {
	switch {
	case m.Type != "BPE":
		return fmt.Errorf("model.type %q is not supported (supported: BPE)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("model.dropout %v is not supported", *m.Dropout)
	case m.ByteFallback:
		return fmt.Errorf("model.byte_fallback true is not supported (byte-level BPE only)")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return fmt.Errorf("model.continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("model.end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	if isNull(m.Vocab) {
		return fmt.Errorf("model.vocab is missing")
	}
	t.ignoreMerges = m.IgnoreMerges
	t.vocab = make(map[string]int32, len(m.Vocab)/16)
	maxID := int32(-1)
	err := readVocab(m.Vocab, func(tok []byte, id int32) error {
		if id < 0 {
			return fmt.Errorf("token %q: negative id %d", tok, id)
		}
		raw, ok := fromByteLevel(string(tok))
		if !ok {
			return fmt.Errorf("token %q: character outside the byte-level alphabet", tok)
		}
		if _, dup := t.vocab[raw]; dup {
			return fmt.Errorf("token %q appears twice", tok)
		}
		t.vocab[raw] = id
		maxID = max(maxID, id)
		return nil
	})
	if err != nil {
		return err
	}
	if len(t.vocab) == 0 {
		return fmt.Errorf("model.vocab is empty")
	}
	t.tokens = make([]string, maxID+1)
	t.known = make([]bool, maxID+1)
	for raw, id := range t.vocab {
		if t.known[id] {
			return fmt.Errorf("model.vocab: id %d used twice", id)
		}
		t.tokens[id], t.known[id] = raw, true
	}
	for b := 0; b < 256; b++ {
		id, ok := t.vocab[string([]byte{byte(b)})]
		if !ok {
			return fmt.Errorf("model.vocab: no token for byte 0x%02x (%q); a byte-level vocabulary has all 256", b, string(byteToRune[b]))
		}
		t.byteID[b] = id
	}
	var pairs []pairSlot
	var buf []byte
	lookup := func(parts ...[]byte) (int32, bool) {
		buf = buf[:0]
		for _, p := range parts {
			var ok bool
			if buf, ok = appendFromByteLevel(buf, p); !ok {
				return 0, false
			}
		}
		id, ok := t.vocab[string(buf)]
		return id, ok
	}
	defer func() {
		t.merges = newPairTable(len(pairs))
		for _, p := range pairs {
			t.merges.putFirst(p.key, p.val)
		}
	}()
	if isNull(m.Merges) {
		return nil
	}
	return readMerges(m.Merges, func(rank int, a, b []byte) error {
		l, lok := lookup(a)
		r, rok := lookup(b)
		n, nok := lookup(a, b)
		if !lok || !rok || !nok {
			return fmt.Errorf("(%q %q): a part or the merged token is not in model.vocab", a, b)
		}
		pairs = append(pairs, pairSlot{pairKey(l, r), uint64(rank)<<32 | uint64(uint32(n))})
		return nil
	})
}

func (t *Tokenizer) loadAdded(list []addedJSON) error {
	var matchable []addedToken
	for i, a := range list {
		field := fmt.Sprintf("added_tokens[%d] (%q)", i, a.Content)
		switch {
		case a.Content == "":
			return fmt.Errorf("%s: empty content", field)
		case a.ID < 0:
			return fmt.Errorf("%s: negative id %d", field, a.ID)
		case a.LStrip:
			return fmt.Errorf("%s.lstrip true is not supported", field)
		case a.RStrip:
			return fmt.Errorf("%s.rstrip true is not supported", field)
		case a.SingleWord:
			return fmt.Errorf("%s.single_word true is not supported", field)
		case a.Normalized && t.nfc && !norm.NFC.IsNormalString(a.Content):
			return fmt.Errorf("%s.normalized true with content that NFC changes is not supported", field)
		}
		if int(a.ID) >= len(t.tokens) {
			grow := int(a.ID) + 1 - len(t.tokens)
			t.tokens = append(t.tokens, make([]string, grow)...)
			t.known = append(t.known, make([]bool, grow)...)
		}
		if t.known[a.ID] && t.tokens[a.ID] != a.Content {
			return fmt.Errorf("%s: id %d is already the vocabulary token %q", field, a.ID, t.tokens[a.ID])
		}
		t.tokens[a.ID], t.known[a.ID] = a.Content, true
		matchable = append(matchable, addedToken{a.Content, a.ID, a.Special})
	}
	t.special = make([]bool, len(t.tokens))
	for _, a := range matchable {
		t.special[a.id] = a.special
	}
	sort.Slice(matchable, func(i, j int) bool { return matchable[i].content < matchable[j].content })
	t.added = newAddedMatcher(matchable)
	t.addedList = matchable
	return nil
}

// pairKey packs a merge pair of ids.
func pairKey(l, r int32) uint64 { return uint64(uint32(l))<<32 | uint64(uint32(r)) }
