package tokenizer

import "container/heap"

// linearMax is the word length (in bytes) up to which bpe uses the simple
// quadratic merge loop; longer words use the heap.
const linearMax = 48

// noRank marks a pair that has no merge.
const noRank = ^uint32(0)

// rankOf returns the rank and merged id of the pair (l, r), or noRank.
func (t *Tokenizer) rankOf(l, r int32) (uint32, int32) {
	v, ok := t.merges.get(pairKey(l, r))
	if !ok {
		return noRank, 0
	}
	return uint32(v >> 32), int32(uint32(v))
}

// bpe appends to dst the ids of word (raw bytes, len >= 2) after merging by
// rank: repeatedly merge the adjacent pair of lowest rank, leftmost first.
func (t *Tokenizer) bpe(e *encoder, word string, dst []int32) []int32 {
	if t.ignoreMerges {
		if id, ok := t.vocab[word]; ok {
			return append(dst, id)
		}
	}
	if len(word) > linearMax {
		return t.bpeHeap(e, word, dst)
	}
	syms := e.syms[:0]
	for i := 0; i < len(word); i++ {
		syms = append(syms, t.byteID[word[i]])
	}
	ranks := e.ranks[:0]
	ids := e.mergedIDs[:0]
	for k := 0; k+1 < len(syms); k++ {
		r, id := t.rankOf(syms[k], syms[k+1])
		ranks, ids = append(ranks, r), append(ids, id)
	}
	for len(syms) > 1 {
		best, bestRank := -1, noRank
		for k, r := range ranks {
			if r < bestRank {
				best, bestRank = k, r
			}
		}
		if best < 0 {
			break
		}
		syms[best] = ids[best]
		syms = append(syms[:best+1], syms[best+2:]...)
		ranks = append(ranks[:best], ranks[best+1:]...)
		ids = append(ids[:best], ids[best+1:]...)
		if best > 0 {
			ranks[best-1], ids[best-1] = t.rankOf(syms[best-1], syms[best])
		}
		if best < len(ranks) {
			ranks[best], ids[best] = t.rankOf(syms[best], syms[best+1])
		}
	}
	e.syms, e.ranks, e.mergedIDs = syms, ranks, ids
	return append(dst, syms...)
}

// symbol is one node of the doubly linked list bpeHeap merges in.
type symbol struct {
	id         int32
	prev, next int32 // indices; -1 at the ends
	gone       bool
}

// candidate is a possible merge of symbols at pos and its successor.
type candidate struct {
	rank   uint32
	pos    int32
	l, r   int32 // ids the pair had when queued; stale entries are skipped
	merged int32
}

type candidateHeap []candidate

func (h candidateHeap) Len() int { return len(h) }
func (h candidateHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h candidateHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candidateHeap) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *candidateHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// bpeHeap is bpe for long words: O(n log n) with a priority queue ordered by
// (rank, position), the order HF tokenizers merges in.
func (t *Tokenizer) bpeHeap(e *encoder, word string, dst []int32) []int32 {
	n := len(word)
	syms := e.list[:0]
	for i := 0; i < n; i++ {
		syms = append(syms, symbol{id: t.byteID[word[i]], prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[n-1].next = -1
	h := e.heap[:0]
	push := func(pos int32) {
		nx := syms[pos].next
		if nx < 0 {
			return
		}
		if r, id := t.rankOf(syms[pos].id, syms[nx].id); r != noRank {
			heap.Push(&h, candidate{r, pos, syms[pos].id, syms[nx].id, id})
		}
	}
	for i := 0; i+1 < n; i++ {
		if r, id := t.rankOf(syms[i].id, syms[i+1].id); r != noRank {
			h = append(h, candidate{r, int32(i), syms[i].id, syms[i+1].id, id})
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		c := heap.Pop(&h).(candidate)
		s := &syms[c.pos]
		if s.gone || s.id != c.l || s.next < 0 || syms[s.next].id != c.r {
			continue
		}
		nx := s.next
		s.id = c.merged
		syms[nx].gone = true
		s.next = syms[nx].next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			push(s.prev)
		}
		push(c.pos)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	e.list, e.heap = syms, h
	return dst
}
