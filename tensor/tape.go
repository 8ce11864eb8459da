package tensor

import "fmt"

// TapeOf records the backward steps of the ops run on it, for element type T.
// A tape is used by one goroutine at a time.
type TapeOf[T Float] struct {
	b      Backend[T]
	record bool
	steps  []func()
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

// alloc returns a zero activation tensor of the given shape on the tape's backend.
func (tp *TapeOf[T]) alloc(name string, shape ...int) *Of[T] {
	return &Of[T]{Name: name, Shape: append([]int(nil), shape...), Store: tp.b.Alloc(numel(shape))}
}

// Recording reports whether the tape records backward steps (NewTape) or
// not (NewInference).
func (tp *TapeOf[T]) Recording() bool { return tp.record }

// Len returns the number of recorded backward steps.
func (tp *TapeOf[T]) Len() int { return len(tp.steps) }

// Reset drops the recorded steps (releasing the intermediates they hold).
func (tp *TapeOf[T]) Reset() { tp.steps = tp.steps[:0] }

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
// needing gradients.
func (tp *TapeOf[T]) Record(out *Of[T], back func()) {
	out.RequiresGrad = true
	tp.steps = append(tp.steps, func() {
		if out.GradStore != nil {
			back()
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
	tp.b.Fill(loss.EnsureGrad(), 1)
	tp.runBackward()
}

// runBackward runs the recorded steps in reverse, dropping each once run,
// and resets the tape.
func (tp *TapeOf[T]) runBackward() {
	for i := len(tp.steps) - 1; i >= 0; i-- {
		tp.steps[i]()
		tp.steps[i] = nil
	}
	tp.Reset()
}
