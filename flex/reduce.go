package flex

import (
	"fmt"
	"slices"
	"sync"
)

// orderedSum adds the partial dq tiles of Backward's kv-block tasks into dq
// in a fixed order, so that the result does not depend on scheduling: every
// q tile receives its contributions in ascending task position (the order
// of taskOrder, which does not depend on GOMAXPROCS). A contribution that
// arrives before an earlier task's is parked until that one has been added;
// since tasks start in order, only tasks still running hold others back,
// so few tiles are parked at any time.
type orderedSum[T elem] struct {
	dq    []T
	tileN int                         // elements of a full tile (bq·D)
	base  func(tile int) (off, n int) // where tile's elements are in dq
	tiles []tileSum[T]
	order []int32 // contributing task positions, ascending, per tile (CSR with tiles[i].lo/hi)

	mu   sync.Mutex // guards free
	free [][]T
}

// tileSum is the state of one q tile: its contributors order[lo:hi], how
// many have been added, and the early contributions parked.
type tileSum[T elem] struct {
	mu     sync.Mutex
	lo, hi int32
	next   int32
	parked []parkedTile[T]
}

type parkedTile[T elem] struct {
	pos int32
	buf []T // nil: the task's pair was fully masked and adds nothing
}

// newOrderedSum builds the per-tile contributor lists; pairs(pos, fn) must
// call fn(tile) once for every q tile that task position pos adds into,
// the same tiles add is later called with.
func newOrderedSum[T elem](dq []T, nTiles, tileN int, base func(tile int) (off, n int), nTasks int, pairs func(pos int, fn func(tile int))) *orderedSum[T] {
	s := &orderedSum[T]{dq: dq, tileN: tileN, base: base, tiles: make([]tileSum[T], nTiles)}
	count := make([]int32, nTiles+1)
	for pos := 0; pos < nTasks; pos++ {
		pairs(pos, func(tile int) { count[tile+1]++ })
	}
	for i := 1; i <= nTiles; i++ {
		count[i] += count[i-1]
	}
	s.order = make([]int32, count[nTiles])
	for i := range s.tiles {
		s.tiles[i].lo, s.tiles[i].next, s.tiles[i].hi = count[i], count[i], count[i]
	}
	for pos := 0; pos < nTasks; pos++ {
		pairs(pos, func(tile int) {
			ts := &s.tiles[tile]
			s.order[ts.hi] = int32(pos)
			ts.hi++
		})
	}
	return s
}

// add adds part (the contribution of task position pos to tile, tileN
// long, nil for none) once every earlier contributor of the tile has been
// added. It returns the buffer the caller may use for its next
// contribution: part itself, or a fresh one when part was parked.
func (s *orderedSum[T]) add(tile, pos int, part []T) []T {
	ts := &s.tiles[tile]
	ts.mu.Lock()
	if ts.next >= ts.hi {
		ts.mu.Unlock()
		panic(fmt.Sprintf("flex: q tile %d got more contributions than its %d tasks", tile, ts.hi-ts.lo))
	}
	if s.order[ts.next] != int32(pos) {
		ts.parked = append(ts.parked, parkedTile[T]{int32(pos), part})
		ts.mu.Unlock()
		if part == nil {
			return nil
		}
		return s.get()
	}
	off, n := s.base(tile)
	dq := s.dq[off : off+n]
	accumulate(dq, part)
	ts.next++
	for ts.next < ts.hi && len(ts.parked) > 0 {
		i := slices.IndexFunc(ts.parked, func(p parkedTile[T]) bool { return p.pos == s.order[ts.next] })
		if i < 0 {
			break
		}
		p := ts.parked[i]
		ts.parked = slices.Delete(ts.parked, i, i+1)
		accumulate(dq, p.buf)
		s.put(p.buf)
		ts.next++
	}
	ts.mu.Unlock()
	return part
}

// accumulate adds part (if any) into dq element by element.
func accumulate[T elem](dq, part []T) {
	if part == nil {
		return
	}
	for x, y := range part[:len(dq)] {
		dq[x] += y
	}
}

func (s *orderedSum[T]) get() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		return b
	}
	return make([]T, s.tileN)
}

func (s *orderedSum[T]) put(b []T) {
	if b == nil {
		return
	}
	s.mu.Lock()
	s.free = append(s.free, b)
	s.mu.Unlock()
}

// tensorGrad accumulates the gradient of one float tensor within one task
// and remembers which elements the task touched, so that a task's share can
// be taken out sparsely and summed across tasks in a fixed order.
type tensorGrad struct {
	g       []float64
	seen    []bool
	touched []int
}

func newTensorGrad(n int) *tensorGrad {
	return &tensorGrad{g: make([]float64, n), seen: make([]bool, n)}
}

// add adds x to element off.
func (t *tensorGrad) add(off int, x float64) {
	if !t.seen[off] {
		t.seen[off] = true
		t.touched = append(t.touched, off)
	}
	t.g[off] += x
}

// sparseGrad is one task's share of a tensor gradient: val[i] at idx[i].
type sparseGrad struct {
	idx []int
	val []float64
}

// take returns the gradient accumulated since the last take and resets it.
func (t *tensorGrad) take() sparseGrad {
	sg := sparseGrad{idx: slices.Clone(t.touched), val: make([]float64, len(t.touched))}
	for i, off := range t.touched {
		sg.val[i] = t.g[off]
		t.g[off], t.seen[off] = 0, false
	}
	t.touched = t.touched[:0]
	return sg
}
