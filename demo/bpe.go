package demo

import (
	"container/heap"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/dlclark/regexp2"
)

// SplitPattern is the pre-tokenizer regex of the demo tokenizer (the
// Qwen2/Qwen3 family's split: contractions, letter runs with one leading
// non-letter, single digits, punctuation runs, newlines, whitespace).
const SplitPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// BPEOptions configures TrainBPE.
type BPEOptions struct {
	// VocabSize is the total vocabulary: 256 byte tokens, the merges, and the
	// special tokens.
	VocabSize int
	// Specials are added after the merged tokens, in order.
	Specials []string
	// MinFrequency stops merging when the best pair occurs fewer times (0: 2).
	MinFrequency int
}

// BPE is a trained byte-level BPE vocabulary.
type BPE struct {
	// Tokens holds the raw bytes of every non-special token by id: ids
	// 0..255 are the single bytes, then one token per merge.
	Tokens []string
	// Merges lists the merged pairs by rank; merge r created token 256+r.
	Merges [][2]int32
	// Specials are the special tokens; Specials[i] has id len(Tokens)+i.
	Specials []string
}

// VocabSize returns the number of ids, special tokens included.
func (b *BPE) VocabSize() int { return len(b.Tokens) + len(b.Specials) }

// SpecialID returns the id of special token s.
func (b *BPE) SpecialID(s string) (int, bool) {
	for i, t := range b.Specials {
		if t == s {
			return len(b.Tokens) + i, true
		}
	}
	return 0, false
}

// TrainBPE learns byte-level BPE merges on docs: the text is split with
// SplitPattern, word frequencies are counted, and the most frequent adjacent
// pair (ties: smallest left id, then right id) is merged until the
// vocabulary is full or no pair occurs MinFrequency times.
func TrainBPE(docs []string, opts BPEOptions) (*BPE, error) {
	minFreq := opts.MinFrequency
	if minFreq <= 0 {
		minFreq = 2
	}
	nMerges := opts.VocabSize - 256 - len(opts.Specials)
	if nMerges < 0 {
		return nil, fmt.Errorf("bpe: vocab size %d is below 256 bytes + %d specials", opts.VocabSize, len(opts.Specials))
	}
	counts, err := countWords(docs)
	if err != nil {
		return nil, err
	}
	t := newBPETrainer(counts)
	b := &BPE{Specials: append([]string(nil), opts.Specials...)}
	for i := 0; i < 256; i++ {
		b.Tokens = append(b.Tokens, string([]byte{byte(i)}))
	}
	for len(b.Merges) < nMerges {
		key, n := t.best()
		if n < minFreq {
			break
		}
		l, r := int32(key>>32), int32(uint32(key))
		id := int32(len(b.Tokens))
		b.Tokens = append(b.Tokens, b.Tokens[l]+b.Tokens[r])
		b.Merges = append(b.Merges, [2]int32{l, r})
		t.merge(key, id)
	}
	return b, nil
}

// countWords splits docs with SplitPattern on all cores and counts words.
func countWords(docs []string) (map[string]int, error) {
	workers := runtime.GOMAXPROCS(0)
	if workers > len(docs) {
		workers = max(1, len(docs))
	}
	maps := make([]map[string]int, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			re := regexp2.MustCompile(SplitPattern, regexp2.Unicode)
			m := map[string]int{}
			for i := w; i < len(docs); i += workers {
				words, err := splitWords(re, docs[i])
				if err != nil {
					errs[w] = err
					return
				}
				for _, s := range words {
					m[s]++
				}
			}
			maps[w] = m
		}(w)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	total := maps[0]
	for _, m := range maps[1:] {
		for k, v := range m {
			total[k] += v
		}
	}
	return total, nil
}

// splitWords returns the pieces of text matched by re, in order.
func splitWords(re *regexp2.Regexp, text string) ([]string, error) {
	var out []string
	runes := []rune(text)
	m, err := re.FindRunesMatch(runes)
	for m != nil && err == nil {
		out = append(out, m.String())
		m, err = re.FindNextMatch(m)
	}
	if err != nil {
		return nil, fmt.Errorf("bpe: split: %w", err)
	}
	return out, nil
}

// bpeTrainer holds words as symbol sequences, pair counts, the words where
// each pair occurs, and a lazy max-heap of pair counts.
type bpeTrainer struct {
	words  [][]int32
	freq   []int
	pairs  map[uint64]int
	where  map[uint64][]int32
	h      pairHeap
	marked []int // last merge step that touched word i
	step   int
}

func pairKey(l, r int32) uint64 { return uint64(uint32(l))<<32 | uint64(uint32(r)) }

func newBPETrainer(counts map[string]int) *bpeTrainer {
	t := &bpeTrainer{pairs: map[uint64]int{}, where: map[uint64][]int32{}}
	// Deterministic word order: the map order must not matter for ties.
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		syms := make([]int32, len(k))
		for i := 0; i < len(k); i++ {
			syms[i] = int32(k[i])
		}
		wi := int32(len(t.words))
		t.words = append(t.words, syms)
		t.freq = append(t.freq, counts[k])
		for i := 0; i+1 < len(syms); i++ {
			p := pairKey(syms[i], syms[i+1])
			t.pairs[p] += counts[k]
			t.where[p] = append(t.where[p], wi)
		}
	}
	t.marked = make([]int, len(t.words))
	for p, n := range t.pairs {
		t.h = append(t.h, pairCount{p, n})
	}
	heap.Init(&t.h)
	return t
}

// best returns the most frequent pair and its count (0 when none is left).
func (t *bpeTrainer) best() (uint64, int) {
	for t.h.Len() > 0 {
		top := t.h[0]
		if n, ok := t.pairs[top.key]; ok && n == top.n {
			return top.key, top.n
		}
		heap.Pop(&t.h) // stale entry
	}
	return 0, 0
}

// merge replaces every occurrence of pair key by symbol id.
func (t *bpeTrainer) merge(key uint64, id int32) {
	l, r := int32(key>>32), int32(uint32(key))
	t.step++
	changed := map[uint64]bool{}
	for _, wi := range t.where[key] {
		if t.marked[wi] == t.step {
			continue
		}
		t.marked[wi] = t.step
		old := t.words[wi]
		f := t.freq[wi]
		found := false
		for i := 0; i+1 < len(old); i++ {
			if old[i] == l && old[i+1] == r {
				found = true
				break
			}
		}
		if !found {
			continue // stale index entry
		}
		for i := 0; i+1 < len(old); i++ {
			p := pairKey(old[i], old[i+1])
			t.pairs[p] -= f
			changed[p] = true
		}
		nw := make([]int32, 0, len(old))
		for i := 0; i < len(old); i++ {
			if i+1 < len(old) && old[i] == l && old[i+1] == r {
				nw = append(nw, id)
				i++
				continue
			}
			nw = append(nw, old[i])
		}
		t.words[wi] = nw
		for i := 0; i+1 < len(nw); i++ {
			p := pairKey(nw[i], nw[i+1])
			t.pairs[p] += f
			changed[p] = true
			if nw[i] == id || nw[i+1] == id {
				t.where[p] = append(t.where[p], wi)
			}
		}
	}
	delete(t.where, key)
	// Push fresh counts in a deterministic order.
	keys := make([]uint64, 0, len(changed))
	for p := range changed {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	for _, p := range keys {
		if n := t.pairs[p]; n > 0 {
			heap.Push(&t.h, pairCount{p, n})
		} else {
			delete(t.pairs, p)
		}
	}
}

type pairCount struct {
	key uint64
	n   int
}

// pairHeap orders by count descending, then key ascending.
type pairHeap []pairCount

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].n != h[j].n {
		return h[i].n > h[j].n
	}
	return h[i].key < h[j].key
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pairCount)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
