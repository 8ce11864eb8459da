package tokenizer

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is a loaded byte-level BPE tokenizer. It is safe for concurrent
// use; each goroutine that encodes borrows a private word cache.
type Tokenizer struct {
	hash         string
	nfc          bool
	splitters    []splitter
	ignoreMerges bool
	vocab        map[string]int32 // raw bytes -> id (model vocabulary)
	merges       *pairTable       // pairKey(l, r) -> rank<<32 | merged id
	byteID       [256]int32
	tokens       []string // id -> raw bytes (added tokens: their content)
	known        []bool   // id -> whether tokens[id] is defined
	special      []bool   // id -> special added token
	added        *addedMatcher
	addedList    []addedToken
	states       chan *encoder // idle encoders, reused with their caches
}

// cacheLimit bounds the words an encoder caches before it starts afresh.
const cacheLimit = 1 << 17

// encoder is the per-goroutine scratch state of Encode.
type encoder struct {
	cache     map[string][]int32
	arena     []int32 // backing store of cached id slices
	chunks    [][]int // split offsets per split stage
	syms      []int32
	ranks     []uint32
	mergedIDs []int32
	list      []symbol
	heap      candidateHeap
	normOrig  []int32
	ids       []int32
}

func (t *Tokenizer) getEncoder() *encoder {
	select {
	case e := <-t.states:
		return e
	default:
		return &encoder{cache: make(map[string][]int32, 1024), chunks: make([][]int, len(t.splitters))}
	}
}

func (t *Tokenizer) putEncoder(e *encoder) {
	select {
	case t.states <- e:
	default:
	}
}

// Hash is the hex SHA-256 of the tokenizer.json bytes it was parsed from.
func (t *Tokenizer) Hash() string { return t.hash }

// VocabSize is one more than the largest token id (model and added tokens).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// NFC reports whether the tokenizer normalises text to NFC before splitting.
func (t *Tokenizer) NFC() bool { return t.nfc }

// TokenID returns the id of an added token's content or of a vocabulary
// entry given as raw bytes.
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	if id, ok := t.added.exact(s); ok {
		return id, true
	}
	id, ok := t.vocab[s]
	return id, ok
}

// Token returns the raw bytes of token id (an added token's content); ok is
// false for an id outside the vocabulary.
func (t *Tokenizer) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.tokens) || !t.known[id] {
		return "", false
	}
	return t.tokens[id], true
}

// VocabName returns token id as tokenizer.json and HF's get_vocab() name
// it: an added token's content, a model vocabulary entry in the byte-level
// alphabet; ok is false for an id with no token.
func (t *Tokenizer) VocabName(id int32) (string, bool) {
	raw, ok := t.Token(id)
	if !ok {
		return "", false
	}
	if a, ok := t.added.exact(raw); ok && a == id {
		return raw, true
	}
	return toByteLevel(raw), true
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.special) && t.special[id]
}

// Encode returns the token ids of text, as HF tokenizers'
// encode(text, add_special_tokens=False).
func (t *Tokenizer) Encode(text string) []int32 { return t.AppendEncode(nil, text) }

// AppendEncode appends the token ids of text to dst.
func (t *Tokenizer) AppendEncode(dst []int32, text string) []int32 {
	e := t.getEncoder()
	dst = t.encode(e, dst, nil, text)
	t.putEncoder(e)
	return dst
}

// EncodeOffsets returns the ids of text and, for each, the byte offset in
// text where the token starts. Where NFC changed the text, a token starts
// at the start of the original characters it was normalised from.
func (t *Tokenizer) EncodeOffsets(text string) (ids, starts []int32) {
	e := t.getEncoder()
	ids = t.encode(e, nil, &starts, text)
	t.putEncoder(e)
	return ids, starts
}

// EncodeBatch encodes texts on up to workers goroutines (GOMAXPROCS when
// workers <= 0); out[i] holds the ids of texts[i].
func (t *Tokenizer) EncodeBatch(texts []string, workers int) [][]int32 {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(texts))
	out := make([][]int32, len(texts))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := t.getEncoder()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(texts) {
					break
				}
				out[i] = t.encode(e, nil, nil, texts[i])
			}
			t.putEncoder(e)
		}()
	}
	wg.Wait()
	return out
}

// encode appends the ids of text to dst and, when starts is not nil, their
// byte offsets to *starts.
func (t *Tokenizer) encode(e *encoder, dst []int32, starts *[]int32, text string) []int32 {
	for pos := 0; pos < len(text); {
		ms, me, id := t.added.find(text, pos)
		if ms > pos {
			dst = t.encodeSegment(e, dst, starts, text[pos:ms], pos)
		}
		if ms == len(text) {
			break
		}
		dst = append(dst, id)
		if starts != nil {
			*starts = append(*starts, int32(ms))
		}
		pos = me
	}
	return dst
}

// encodeSegment encodes text that holds no added token; base is its offset.
func (t *Tokenizer) encodeSegment(e *encoder, dst []int32, starts *[]int32, seg string, base int) []int32 {
	var orig []int32 // normalised byte -> original offset, when NFC changed seg
	if t.nfc && !norm.NFC.IsNormalString(seg) {
		seg, orig = nfcWithOffsets(seg, e.normOrig[:0])
		e.normOrig = orig
	}
	n0 := len(dst)
	if sc, ok := t.fast(); ok { // one scanner stage: no piece list
		for i := 0; i < len(seg); {
			var j int
			if sc.gpt2 {
				j = sc.nextGPT2(seg, i)
			} else {
				j = sc.nextLlama(seg, i)
			}
			dst = t.encodeWord(e, dst, seg[i:j])
			i = j
		}
	} else {
		dst = t.splitStage(e, dst, seg, 0)
	}
	if starts != nil {
		off := 0
		for _, id := range dst[n0:] {
			o := base + off
			if orig != nil {
				o = base + int(orig[off])
			}
			*starts = append(*starts, int32(o))
			off += len(t.tokens[id])
		}
	}
	return dst
}

// fast returns the scanner when it is the only split stage.
func (t *Tokenizer) fast() (*scanner, bool) {
	if len(t.splitters) != 1 {
		return nil, false
	}
	sc, ok := t.splitters[0].(*scanner)
	return sc, ok
}

// splitStage applies split stage k to s and encodes the pieces.
func (t *Tokenizer) splitStage(e *encoder, dst []int32, s string, k int) []int32 {
	if k == len(t.splitters) {
		return t.encodeWord(e, dst, s)
	}
	// Each stage owns its buffer, so deeper stages cannot overwrite ends.
	ends := t.splitters[k].split(s, e.chunks[k][:0])
	e.chunks[k] = ends
	prev := 0
	for _, end := range ends {
		dst = t.splitStage(e, dst, s[prev:end], k+1)
		prev = end
	}
	return dst
}

// encodeWord appends the BPE ids of one pre-token.
func (t *Tokenizer) encodeWord(e *encoder, dst []int32, w string) []int32 {
	if len(w) == 1 {
		return append(dst, t.byteID[w[0]])
	}
	if ids, ok := e.cache[w]; ok {
		return append(dst, ids...)
	}
	n0 := len(dst)
	dst = t.bpe(e, w, dst)
	if len(e.cache) >= cacheLimit {
		clear(e.cache)
		e.arena = nil
	}
	if cap(e.arena)-len(e.arena) < len(dst)-n0 {
		e.arena = make([]int32, 0, max(1<<14, len(dst)-n0))
	}
	k := len(e.arena)
	e.arena = append(e.arena, dst[n0:]...)
	e.cache[strings.Clone(w)] = e.arena[k:len(e.arena):len(e.arena)]
	return dst
}

// nfcWithOffsets returns NFC(s) and, for each of its bytes, the offset in s
// of the normalisation segment it came from.
func nfcWithOffsets(s string, orig []int32) (string, []int32) {
	var it norm.Iter
	it.InitString(norm.NFC, s)
	var b strings.Builder
	for !it.Done() {
		at := it.Pos()
		seg := it.Next()
		b.Write(seg)
		for range seg {
			orig = append(orig, int32(at))
		}
	}
	return b.String(), orig
}

// Decode returns the text of ids: the concatenated raw bytes of the tokens.
// skipSpecial leaves out special added tokens. It panics on an id outside
// the vocabulary (check with Token).
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	var b strings.Builder
	for _, id := range ids {
		s, ok := t.Token(id)
		if !ok {
			panic(fmt.Sprintf("tokenizer: Decode: id %d outside the vocabulary (size %d)", id, len(t.tokens)))
		}
		if skipSpecial && t.special[id] {
			continue
		}
		b.WriteString(s)
	}
	return b.String()
}

// addedToken is an entry of added_tokens.
type addedToken struct {
	content string
	id      int32
	special bool
}

// addedMatcher finds added tokens in text: leftmost, then longest.
type addedMatcher struct {
	first [256]bool // bytes that start some token
	nodes []trieNode
	only  int // the single first byte when there is one, else -1
}

type trieNode struct {
	next map[byte]int32
	id   int32 // token ending here, or -1
}

func newAddedMatcher(list []addedToken) *addedMatcher {
	m := &addedMatcher{nodes: []trieNode{{id: -1}}, only: -1}
	nfirst := 0
	for _, a := range list {
		if !m.first[a.content[0]] {
			nfirst++
			m.first[a.content[0]] = true
			m.only = int(a.content[0])
		}
		n := int32(0)
		for i := 0; i < len(a.content); i++ {
			c := a.content[i]
			nx, ok := m.nodes[n].next[c]
			if !ok {
				if m.nodes[n].next == nil {
					m.nodes[n].next = map[byte]int32{}
				}
				nx = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{id: -1})
				m.nodes[n].next[c] = nx
			}
			n = nx
		}
		m.nodes[n].id = a.id
	}
	if nfirst != 1 {
		m.only = -1
	}
	return m
}

// longestAt returns the end and id of the longest token starting at i.
func (m *addedMatcher) longestAt(s string, i int) (end int, id int32) {
	end, id = -1, -1
	n := int32(0)
	for j := i; j < len(s); j++ {
		nx, ok := m.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = nx
		if m.nodes[n].id >= 0 {
			end, id = j+1, m.nodes[n].id
		}
	}
	return end, id
}

// find returns the first added token at or after pos: its start, end and id;
// start is len(s) when there is none.
func (m *addedMatcher) find(s string, pos int) (start, end int, id int32) {
	if len(m.nodes) == 1 {
		return len(s), len(s), -1
	}
	for i := pos; i < len(s); i++ {
		if m.only >= 0 {
			k := strings.IndexByte(s[i:], byte(m.only))
			if k < 0 {
				break
			}
			i += k
		} else if !m.first[s[i]] {
			continue
		}
		if e, id := m.longestAt(s, i); e >= 0 {
			return i, e, id
		}
	}
	return len(s), len(s), -1
}

// exact returns the id of the added token whose content is s.
func (m *addedMatcher) exact(s string) (int32, bool) {
	if s == "" {
		return 0, false
	}
	if e, id := m.longestAt(s, 0); e == len(s) {
		return id, true
	}
	return 0, false
}
