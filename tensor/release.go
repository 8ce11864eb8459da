package tensor

import "slices"

// stepBuf is a whole step allocation that a tape made for an op's output
// or for a statistic an op keeps for its backward step, which the tape
// gives back once it is dead (ReleaseGrads). An output and its Reshape
// views share one.
type stepBuf[T Float] struct {
	store   Storage[T]
	saves   int  // recorded backward steps that read it and have not run
	keep    bool // KeepValue, KeepGrad or the loss: it lives until the step ends
	dropped bool // the forward pass reads it no more (EndScope, Backward)
	freed   bool

	owner *Of[T]   // the tensor the op made with this storage
	views []*Of[T] // its Reshape views
	redo  *redo[T] // how the op recomputes it (Recompute), nil if it cannot
}

// own makes t's storage, a whole step allocation an op just made, one the
// tape gives back when it is dead, when the tape releases op outputs (nil
// storage is no allocation); it returns t.
func (tp *TapeOf[T]) own(t *Of[T]) *Of[T] {
	if tp.acts && t.Store != nil {
		t.buf = &stepBuf[T]{store: t.Store, owner: t}
		tp.bufs = append(tp.bufs, t.buf)
	}
	return t
}

// stat returns a statistic of n elements that an op writes whole and keeps
// for its backward step (AllocStatOut: no memset), as a tensor that the
// step lists among its saves.
func (tp *TapeOf[T]) stat(name string, n int) *Of[T] {
	return tp.own(&Of[T]{Name: name, Shape: []int{n}, Store: tp.b.AllocStatOut(n)})
}

// free gives back b when it is dead: the forward pass is done with it, no
// backward step left reads it, and it is not to be kept.
func (tp *TapeOf[T]) free(b *stepBuf[T]) {
	if b.freed || !b.dropped || b.keep {
		return
	}
	if b.saves > 0 {
		tp.evict(b)
		return
	}
	if b.redo == nil || !b.redo.evicted {
		tp.b.FreeStep(b.store)
	}
	b.freed = true
	tp.dropDeps(b)
}

// KeepValue exempts t's values (and those of the Reshape views sharing its
// storage) from ReleaseGrads in the next Backward: they can be read
// afterwards, until the step ends.
func (tp *TapeOf[T]) KeepValue(t *Of[T]) {
	if t.buf != nil {
		t.buf.keep = true
	}
}

// KeepActivations makes ReleaseGrads give back gradients only: op outputs
// made from now on live until the step ends, as before ReleaseGrads
// released them (to measure what that saves, or to read many intermediates
// after Backward).
func (tp *TapeOf[T]) KeepActivations() { tp.acts = false }

// ScopeMark is a position in a forward pass, for EndScope.
type ScopeMark int

// BeginScope returns the current position of the forward pass, for
// EndScope.
func (tp *TapeOf[T]) BeginScope() ScopeMark { return ScopeMark(len(tp.bufs)) }

// EndScope declares that the rest of the forward pass reads none of the op
// outputs made since m but those in live (and their Reshape views and
// sources): with ReleaseGrads, those that no backward step reads are given
// back now, the others once the last backward step that reads them has
// run. A model calls it at the end of a layer, with the layer's result, so
// that the dead values of one layer are reused by the next.
func (tp *TapeOf[T]) EndScope(m ScopeMark, live ...*Of[T]) {
	if !tp.frees || int(m) >= len(tp.bufs) {
		return
	}
	for _, b := range tp.bufs[m:] {
		if b.dropped || slices.ContainsFunc(live, func(t *Of[T]) bool { return t.buf == b }) {
			continue
		}
		b.dropped = true
		tp.free(b)
	}
}
