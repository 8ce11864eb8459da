package tensor

import "fmt"

// TapeOf records the backward steps of the ops run on it, for element type T.
// A tape is used by one goroutine at a time.
type TapeOf[T Float] struct {
	b      Backend[T]
	record bool
	steps  []func()

	frees bool            // ReleaseGrads on a backend that frees step memory (FreesStep)
	keep  map[*Of[T]]bool // KeepGrad
	loss  *Of[T]          // the tensor Backward started from, while it runs

	acts   bool          // ReleaseGrads releases op outputs too (not KeepActivations)
	noRedo bool          // Recompute does nothing (KeepRecomputable)
	bufs   []*stepBuf[T] // the op outputs and statistics it may release, in order made
}

// Tape is the float32 tape that training uses.
type Tape = TapeOf[float32]

// NewTape returns a tape that records ops on backend b.
func NewTape[T Float](b Backend[T]) *TapeOf[T] { return &TapeOf[T]{b: b, record: true} }

// NewInference returns a tape that runs ops on b and records nothing: no
// gradients flow, whatever RequiresGrad says.
func NewInference[T Float](b Backend[T]) *TapeOf[T] { return &TapeOf[T]{b: b} }

// Backend returns the backend the tape's ops run on.
func (tp *TapeOf[T]) Backend() Backend[T] { return tp.b }

// alloc returns an activation tensor of the given shape on the tape's
// backend for an op's output: its contents are undefined (AllocOut), and
// the op writes every element before it reads any. The tape may release it
// (ReleaseGrads).
func (tp *TapeOf[T]) alloc(name string, shape ...int) *Of[T] {
	return tp.own(&Of[T]{Name: name, Shape: append([]int(nil), shape...), Store: tp.b.AllocOut(numel(shape))})
}

// Recording reports whether the tape records backward steps (NewTape) or
// not (NewInference).
func (tp *TapeOf[T]) Recording() bool { return tp.record }

// Len returns the number of recorded backward steps.
func (tp *TapeOf[T]) Len() int { return len(tp.steps) }

// Reset drops the recorded steps (releasing the intermediates they hold).
func (tp *TapeOf[T]) Reset() { tp.steps, tp.bufs = tp.steps[:0], nil }

// ReleaseGrads makes Backward give back each op output's gradient as soon
// as the last backward step that reads it has run: the step that recorded
// the output runs after every step of the ops that consumed it, so the
// gradient is dead from then on; where an input's gradient is dy itself
// (an add's, a view's source's) and the input has none yet, the storage
// is handed on to the input instead of copied. Parameters' gradients (an
// Arena's), the loss's, and those of tensors passed to KeepGrad are kept;
// so is a gradient that EnsureGrad did not allocate itself. Op
// temporaries that the tape knows to be dead (the cross-entropy's) are
// given back too.
//
// It gives back the op outputs themselves (and the statistics ops keep for
// their backward steps) as well, unless KeepActivations is called: each
// recorded step declares the tensors whose values it reads (Record), so an
// output that no step reads is dead once the forward pass is done with it
// (EndScope, or Backward's start), and one that steps read is dead once
// the last of them has run. The loss and tensors passed to KeepValue or
// KeepGrad are kept; a Reshape view and its source are one allocation,
// given back once, when neither is read any more.
//
// It takes effect on a backend whose FreeStep gives memory back
// (Backend.FreesStep: the CUDA backend), where a later allocation of the
// same size reuses it, and does nothing elsewhere: on the CPU the garbage
// collector owns the memory and results are the same either way. Call it
// before the ops it should cover; it lasts for the tape's life.
func (tp *TapeOf[T]) ReleaseGrads() {
	if tp.b.FreesStep() && tp.record {
		tp.frees, tp.acts = true, true
	}
}

// KeepGrad exempts t from ReleaseGrads in the next Backward: its gradient
// and its values (KeepValue) can be read afterwards.
func (tp *TapeOf[T]) KeepGrad(t *Of[T]) {
	if tp.keep == nil {
		tp.keep = map[*Of[T]]bool{}
	}
	tp.keep[t] = true
	tp.KeepValue(t)
}

// release gives back out's gradient (ReleaseGrads) once out's last backward
// step has run, unless out's gradient is to be kept.
func (tp *TapeOf[T]) release(out *Of[T]) {
	if !tp.frees || out.pending > 0 || !out.ownGrad || out == tp.loss || tp.keep[out] {
		return
	}
	tp.b.FreeStep(out.GradStore)
	out.GradStore, out.ownGrad = nil, false
}

// releaseTemp gives back s, an op's temporary that no step reads any more,
// when the tape releases memory (ReleaseGrads); s may be nil.
func (tp *TapeOf[T]) releaseTemp(s Storage[T]) {
	if tp.frees && s != nil {
		tp.b.FreeStep(s)
	}
}

// GradDst returns the storage a backward step puts t's gradient into and
// whether the step must add to it. The first step to reach an op output
// (a tensor with a backward step of its own still to run) that has no
// gradient yet gets new storage with undefined contents (LikeOut: no
// zeroing pass) and accumulate false: it must write every element. Every
// later step, a parameter (its arena's flat gradient, which ZeroGrad
// clears) and a leaf get the gradient EnsureGrad keeps, and add to it. So
// a gradient that several steps produce (a residual stream's) is written
// by the first to run and accumulated by the others.
func (tp *TapeOf[T]) GradDst(t *Of[T]) (s Storage[T], accumulate bool) {
	if t.GradStore == nil && t.arena == nil && t.pending > 0 {
		t.GradStore, t.ownGrad = t.Store.LikeOut(t.Store.Len()), true
		return t.GradStore, false
	}
	return t.EnsureGrad(), true
}

// gradDsts is GradDst for the inputs of one backend call that takes a
// single accumulate flag for all its gradients: a nil entry of ts (an
// input that needs no gradient) gets nil. When some must accumulate and
// others are new, the new ones are zeroed so that all accumulate.
func (tp *TapeOf[T]) gradDsts(ts ...*Of[T]) (dsts []Storage[T], accumulate bool) {
	dsts = make([]Storage[T], len(ts))
	fresh := make([]bool, len(ts))
	for i, t := range ts {
		if t == nil {
			continue
		}
		var acc bool
		dsts[i], acc = tp.GradDst(t)
		fresh[i], accumulate = !acc, accumulate || acc
	}
	if accumulate {
		for i, s := range dsts {
			if fresh[i] {
				tp.b.Fill(s, 0)
			}
		}
	}
	return dsts, accumulate
}

// addGrad adds alpha·g to t's gradient, or writes it there when GradDst
// gives new storage of g's dtype.
func (tp *TapeOf[T]) addGrad(t *Of[T], alpha T, g Storage[T]) {
	dst, acc := tp.GradDst(t)
	if !acc && dst.DType() != g.DType() {
		tp.b.Fill(dst, 0)
		acc = true
	}
	if acc {
		tp.b.Axpy(alpha, g, dst)
		return
	}
	n := g.Len()
	tp.b.Copy2D(1, n, g, n, 0, dst, n, 0, false)
	if alpha != 1 {
		tp.b.Scale(alpha, dst)
	}
}

// passGrad gives t y's gradient (y's op is t plus something else, or a
// view of t, so that dt += dy): as t's own gradient, without a copy, when
// t would get new storage from GradDst and y's gradient would be given
// back once y's running step is done (ReleaseGrads; y's last step, y not
// the loss, not kept); by addGrad otherwise. y's step calls it after its
// last read of dy.
func (tp *TapeOf[T]) passGrad(y, t *Of[T]) {
	g := y.GradStore
	if tp.frees && y.ownGrad && y.pending == 0 && y != tp.loss && !tp.keep[y] &&
		t.GradStore == nil && t.arena == nil && t.pending > 0 && g.DType() == t.Store.DType() && g.Len() == t.Store.Len() {
		t.GradStore, t.ownGrad = g, true
		y.GradStore, y.ownGrad = nil, false
		return
	}
	tp.addGrad(t, 1, g)
}

// beta is Gemm's beta for a destination that accumulates or is overwritten.
func beta[T Float](accumulate bool) T {
	if accumulate {
		return 1
	}
	return 0
}

// needs reports whether an op on these inputs must record a backward step.
func (tp *TapeOf[T]) needs(in ...*Of[T]) bool {
	if !tp.record {
		return false
	}
	for _, t := range in {
		if t != nil && t.RequiresGrad {
			return true
		}
	}
	return false
}

// Record appends a backward step for out: when out has a gradient, back runs
// during Backward (in reverse order of recording). Ops outside this package
// use it to add their own differentiable operations; out is marked as
// needing gradients. saves lists every tensor whose values back reads
// (gradients do not count): ReleaseGrads gives back any other op output
// once the forward pass is done with it, so a value that back reads and
// saves omits is garbage by then.
func (tp *TapeOf[T]) Record(out *Of[T], saves []*Of[T], back func()) {
	out.RequiresGrad = true
	out.pending++
	for _, t := range saves {
		if t.buf != nil {
			t.buf.saves++
		}
	}
	tp.steps = append(tp.steps, func() {
		out.pending--
		if out.GradStore != nil {
			tp.restore(saves)
			back()
			tp.release(out)
		}
		for _, t := range saves {
			if t.buf != nil {
				t.buf.saves--
				tp.free(t.buf)
			}
		}
	})
}

// Backward sets loss's gradient to 1 (loss must have one element), runs
// the recorded steps in reverse and resets the tape. Gradients accumulate
// into Grad of every tensor that requires them; parameters keep theirs until
// ZeroGrad.
func (tp *TapeOf[T]) Backward(loss *Of[T]) {
	if loss.Numel() != 1 {
		panic(fmt.Sprintf("tensor.Backward: loss %v has %d elements, want 1", loss, loss.Numel()))
	}
	if len(tp.steps) == 0 && loss.RequiresGrad {
		panic(fmt.Sprintf("tensor.Backward: loss %v needs gradients but this tape recorded nothing: it was computed on another tape", loss))
	}
	g, _ := tp.GradDst(loss)
	tp.b.Fill(g, 1)
	tp.runBackward(loss)
}

// runBackward runs the recorded steps in reverse from loss, dropping each
// once run, and resets the tape (and KeepGrad's set).
func (tp *TapeOf[T]) runBackward(loss *Of[T]) {
	tp.loss = loss
	tp.KeepValue(loss)
	tp.EndScope(0)
	for i := len(tp.steps) - 1; i >= 0; i-- {
		tp.steps[i]()
		tp.steps[i] = nil
	}
	tp.loss = nil
	clear(tp.keep)
	tp.Reset()
}
