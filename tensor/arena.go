package tensor

import "fmt"

// Arena holds the parameters of one model in one flat buffer (llm.c's
// malloc_and_point_parameters): parameter i's Data is the view
// Data[Offset(i) : Offset(i)+Numel], and once gradients exist its Grad is
// the same range of Grad. An optimizer, an all-reduce and a checkpoint can
// then treat the model as one buffer while the model code keeps its named
// tensors.
//
// Declare every parameter with Param, in the order Params should list them,
// then call Alloc once. The zero Arena is ready for declarations.
type Arena[T Float] struct {
	// Data holds every parameter's values, in declaration order.
	Data []T
	// Grad holds every gradient in the same layout; nil until EnsureGrad
	// (or the EnsureGrad of any of its parameters) allocates it.
	Grad []T

	params []*Of[T]
	offs   []int
	size   int
	alloc  bool
}

// Param declares a parameter of the given shape that requires gradients;
// its values (zero) exist once Alloc has run. It panics after Alloc.
func (a *Arena[T]) Param(name string, shape ...int) *Of[T] {
	if a.alloc {
		panic(fmt.Sprintf("tensor.Arena: parameter %q declared after Alloc", name))
	}
	t := &Of[T]{Name: name, Shape: append([]int(nil), shape...), RequiresGrad: true, arena: a}
	a.params = append(a.params, t)
	a.offs = append(a.offs, a.size)
	a.size += numel(shape)
	return t
}

// Alloc allocates Data for every declared parameter and points each
// parameter's Data at its range. It panics when called twice.
func (a *Arena[T]) Alloc() {
	if a.alloc {
		panic("tensor.Arena: Alloc called twice")
	}
	a.alloc = true
	a.Data = make([]T, a.size)
	for i, t := range a.params {
		t.Data = a.view(a.Data, i)
	}
}

// EnsureGrad allocates the flat gradient (zero) if there is none, points
// every parameter's Grad at its range and returns it. A gradient that a
// parameter held before the flat one existed is copied into its range; a
// parameter whose Grad was set to nil gets its view back.
func (a *Arena[T]) EnsureGrad() []T {
	if !a.alloc {
		panic("tensor.Arena: EnsureGrad before Alloc")
	}
	fresh := a.Grad == nil
	if fresh {
		a.Grad = make([]T, a.size)
	}
	for i, t := range a.params {
		if fresh || t.Grad == nil {
			g := a.view(a.Grad, i)
			copy(g, t.Grad)
			t.Grad = g
		}
	}
	return a.Grad
}

// ZeroGrad clears the flat gradient (keeping its storage).
func (a *Arena[T]) ZeroGrad() { clear(a.Grad) }

// view returns parameter i's range of buf, capped so that an append cannot
// spill into the next parameter.
func (a *Arena[T]) view(buf []T, i int) []T {
	lo, hi := a.offs[i], a.offs[i]+numel(a.params[i].Shape)
	return buf[lo:hi:hi]
}

// Params returns the declared parameters in declaration order.
func (a *Arena[T]) Params() []*Of[T] { return append([]*Of[T](nil), a.params...) }

// Offset returns the offset of the i-th declared parameter in Data and Grad.
func (a *Arena[T]) Offset(i int) int { return a.offs[i] }

// Len returns the total number of parameter elements.
func (a *Arena[T]) Len() int { return a.size }
