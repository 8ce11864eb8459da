package tokenizer

import "math/bits"

// pairTable maps a merge pair (pairKey) to rank<<32 | merged id. It is an
// open-addressing hash table with linear probing, a few times faster than a
// Go map for this one lookup that BPE does per adjacent pair.
type pairTable struct {
	slots []pairSlot
	shift uint
	n     int
}

type pairSlot struct{ key, val uint64 }

// emptyPair marks a free slot; no pair of non-negative ids packs to it.
const emptyPair = ^uint64(0)

func newPairTable(capacity int) *pairTable {
	size := 1 << bits.Len(uint(capacity+capacity/2)) // load factor <= 2/3
	p := &pairTable{slots: make([]pairSlot, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
	for i := range p.slots {
		p.slots[i].key = emptyPair
	}
	return p
}

func (p *pairTable) home(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> p.shift }

// get returns the value of key.
func (p *pairTable) get(key uint64) (uint64, bool) {
	mask := uint64(len(p.slots) - 1)
	for i := p.home(key); ; i = (i + 1) & mask {
		s := &p.slots[i]
		if s.key == key {
			return s.val, true
		}
		if s.key == emptyPair {
			return 0, false
		}
	}
}

// putFirst stores key -> val unless key is present (the first rank wins).
// It panics when the table is full, which newPairTable's sizing prevents.
func (p *pairTable) putFirst(key, val uint64) {
	if p.n >= len(p.slots)-1 {
		panic("tokenizer: pair table full")
	}
	mask := uint64(len(p.slots) - 1)
	for i := p.home(key); ; i = (i + 1) & mask {
		s := &p.slots[i]
		if s.key == key {
			return
		}
		if s.key == emptyPair {
			s.key, s.val = key, val
			p.n++
			return
		}
	}
}
