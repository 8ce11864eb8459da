package tensor

import "fmt"

// redo is how an op recomputes its output from the values of deps, for
// Recompute.
type redo[T Float] struct {
	fn      func(y Storage[T]) // writes every element of the output into y
	deps    []*Of[T]           // the tensors whose values fn reads
	on      bool               // Recompute was called: deps are held for fn
	evicted bool               // the storage is given back, to be recomputed
	redone  bool               // it was recomputed: it lives until its last reader
}

// recomputable records that fn recomputes y, the output the op just made,
// from the values of deps (when the tape releases op outputs).
func (tp *TapeOf[T]) recomputable(y *Of[T], deps []*Of[T], fn func(y Storage[T])) {
	if y.buf != nil && y.buf.owner == y {
		y.buf.redo = &redo[T]{fn: fn, deps: deps}
	}
}

// Recompute marks y, the output of an op that can recompute it (RMSNorm),
// to be given back once the forward pass is done with it (EndScope) even
// though backward steps read it, and recomputed (one pass of its op over
// the inputs, which are kept instead) just before the first of them runs;
// it is given back again after the last. It trades that pass for the
// memory y holds between the forward and the backward pass: an RMSNorm's
// input and statistics are kept for its own backward step anyway, so
// recomputing its output costs no memory. The values are the op's, bit
// for bit. It returns y.
//
// It takes effect when the tape releases op outputs (ReleaseGrads, not
// KeepActivations nor KeepRecomputable) and does nothing otherwise. Call
// it on the op's result, before anything reads it.
func (tp *TapeOf[T]) Recompute(y *Of[T]) *Of[T] {
	b := y.buf
	if b == nil || tp.noRedo {
		return y
	}
	if b.redo == nil || b.owner != y {
		panic(fmt.Sprintf("tensor.Recompute: %v is not an output that its op can recompute", y))
	}
	if !b.redo.on {
		b.redo.on = true
		for _, d := range b.redo.deps {
			if d.buf != nil {
				d.buf.saves++
			}
		}
	}
	return y
}

// KeepRecomputable makes Recompute do nothing: the outputs it marks are
// kept from the forward to the backward pass as any other (to measure what
// recomputing saves).
func (tp *TapeOf[T]) KeepRecomputable() { tp.noRedo = true }

// evict gives back b, which the forward pass reads no more but backward
// steps do, when Recompute marked it and it has not been recomputed yet.
func (tp *TapeOf[T]) evict(b *stepBuf[T]) {
	r := b.redo
	if r == nil || !r.on || r.evicted || r.redone {
		return
	}
	tp.b.FreeStep(b.store)
	r.evicted = true
	b.setStore(nil) // a read before restore is a programmer error: fail loudly
}

// restore recomputes the evicted tensors among saves, those a backward
// step about to run reads.
func (tp *TapeOf[T]) restore(saves []*Of[T]) {
	for _, t := range saves {
		b := t.buf
		if b == nil || b.redo == nil || !b.redo.evicted {
			continue
		}
		s := tp.b.AllocOut(b.store.Len())
		b.redo.fn(s)
		b.redo.evicted, b.redo.redone = false, true
		b.store = s
		b.setStore(s)
	}
}

// dropDeps lets go of what b's recomputation would read, once b is given
// back for good.
func (tp *TapeOf[T]) dropDeps(b *stepBuf[T]) {
	if b.redo == nil || !b.redo.on {
		return
	}
	for _, d := range b.redo.deps {
		if d.buf != nil {
			d.buf.saves--
			tp.free(d.buf)
		}
	}
}

// setStore points b's tensor and its views at s.
func (b *stepBuf[T]) setStore(s Storage[T]) {
	b.owner.Store = s
	for _, v := range b.views {
		v.Store = s
	}
}
