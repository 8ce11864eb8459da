package tensor

import (
	"fmt"
	"math/rand/v2"
)

// Float is the set of element types a tensor holds.
type Float interface{ float32 | float64 }

// Of is a dense row-major tensor of element type T. Data holds the values;
// Grad, when not nil, the gradient of the loss with respect to them (same
// length). RequiresGrad marks a leaf (a parameter) whose gradient the tape
// accumulates; results of ops on such tensors need gradients too.
type Of[T Float] struct {
	Name         string
	Shape        []int
	Data         []T
	Grad         []T
	RequiresGrad bool

	arena *Arena[T] // the arena that holds Data and Grad, for a parameter declared in one
}

// Tensor is the float32 tensor that training uses.
type Tensor = Of[float32]

// New returns a zero tensor of the given shape.
func New[T Float](name string, shape ...int) *Of[T] {
	return &Of[T]{Name: name, Shape: append([]int(nil), shape...), Data: make([]T, numel(shape))}
}

// FromData wraps data as a tensor of the given shape; it panics if the sizes differ.
func FromData[T Float](name string, data []T, shape ...int) *Of[T] {
	if n := numel(shape); n != len(data) {
		panic(fmt.Sprintf("tensor.FromData %q: shape %v needs %d elements, data has %d", name, shape, n, len(data)))
	}
	return &Of[T]{Name: name, Shape: append([]int(nil), shape...), Data: data}
}

// Numel returns the number of elements.
func (t *Of[T]) Numel() int { return len(t.Data) }

// Dim returns the size of dimension i; negative i counts from the end.
func (t *Of[T]) Dim(i int) int {
	if i < 0 {
		i += len(t.Shape)
	}
	return t.Shape[i]
}

// Rows returns the product of all dimensions but the last.
func (t *Of[T]) Rows() int {
	if len(t.Shape) == 0 {
		return 1
	}
	return len(t.Data) / t.Shape[len(t.Shape)-1]
}

// Cols returns the last dimension.
func (t *Of[T]) Cols() int {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[len(t.Shape)-1]
}

// String returns the name and shape.
func (t *Of[T]) String() string { return fmt.Sprintf("%s%v", t.Name, t.Shape) }

// ZeroGrad clears the gradient (keeping its storage).
func (t *Of[T]) ZeroGrad() { clear(t.Grad) }

// EnsureGrad allocates a zero gradient if there is none and returns it.
// For a parameter of an Arena it allocates the arena's flat gradient, so
// that the gradient is a view of it.
func (t *Of[T]) EnsureGrad() []T {
	if t.Grad == nil {
		if t.arena != nil {
			t.arena.EnsureGrad()
			return t.Grad
		}
		t.Grad = make([]T, len(t.Data))
	}
	return t.Grad
}

// FillNormal sets every element to a draw from N(mean, std²).
func (t *Of[T]) FillNormal(rng *rand.Rand, mean, std float64) {
	for i := range t.Data {
		t.Data[i] = T(mean + std*rng.NormFloat64())
	}
}

// Fill sets every element to v.
func (t *Of[T]) Fill(v float64) {
	for i := range t.Data {
		t.Data[i] = T(v)
	}
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: negative dimension in shape %v", shape))
		}
		n *= d
	}
	return n
}
