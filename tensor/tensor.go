package tensor

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
)

// Float is the set of element types a tensor holds.
type Float interface{ float32 | float64 }

// Of is a dense row-major tensor with host element type T. Store holds the
// values on a backend (host memory on the CPU); GradStore, when not nil,
// the gradient of the loss with respect to them (same length).
// RequiresGrad marks a leaf (a parameter) whose gradient the tape
// accumulates; results of ops on such tensors need gradients too.
type Of[T Float] struct {
	Name         string
	Shape        []int
	Store        Storage[T]
	GradStore    Storage[T]
	RequiresGrad bool

	arena   *Arena[T]   // the arena that holds Store and GradStore, for a parameter declared in one or a Span of them
	off     int         // with arena: the offset of Store in the arena's flat values and gradient
	ownGrad bool        // GradStore is EnsureGrad's or GradDst's own allocation, which no other tensor holds
	pending int         // backward steps recorded for this tensor and not yet run
	buf     *stepBuf[T] // Store as a step allocation its tape may give back (ReleaseGrads), shared by Reshape views
}

// Tensor is the float32 tensor that training uses.
type Tensor = Of[float32]

// New returns a zero tensor of the given shape in host memory.
func New[T Float](name string, shape ...int) *Of[T] {
	return &Of[T]{Name: name, Shape: append([]int(nil), shape...), Store: make(Host[T], numel(shape))}
}

// FromData wraps host data as a tensor of the given shape; it panics if the
// sizes differ.
func FromData[T Float](name string, data []T, shape ...int) *Of[T] {
	return FromStorage(name, Host[T](data), shape...)
}

// FromStorage wraps s as a tensor of the given shape; it panics if the
// sizes differ.
func FromStorage[T Float](name string, s Storage[T], shape ...int) *Of[T] {
	if n := numel(shape); n != s.Len() {
		panic(fmt.Sprintf("tensor: %q: shape %v needs %d elements, storage has %d", name, shape, n, s.Len()))
	}
	return &Of[T]{Name: name, Shape: append([]int(nil), shape...), Store: s}
}

// Data returns the values of a tensor in host memory; it panics for a
// tensor on a device (read those with Backend.Download).
func (t *Of[T]) Data() []T { return HostData(t.Store, t.Name) }

// Grad returns the gradient of a tensor in host memory, nil when there is
// none; it panics for a tensor on a device.
func (t *Of[T]) Grad() []T { return HostData(t.GradStore, t.Name+".grad") }

// HasGrad reports whether the tensor has a gradient.
func (t *Of[T]) HasGrad() bool { return t.GradStore != nil }

// DropGrad forgets the gradient (a parameter of an Arena gets its view back
// at its next EnsureGrad).
func (t *Of[T]) DropGrad() { t.GradStore, t.ownGrad = nil, false }

// Numel returns the number of elements.
func (t *Of[T]) Numel() int { return numel(t.Shape) }

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
	return t.Numel() / t.Shape[len(t.Shape)-1]
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

// ZeroGrad clears a host gradient (keeping its storage); a device gradient
// is cleared with Backend.Fill or the arena's ZeroGrad.
func (t *Of[T]) ZeroGrad() { clear(t.Grad()) }

// EnsureGrad allocates a zero gradient alike the values (same backend and
// dtype) if there is none and returns it. For a parameter of an Arena it
// allocates the arena's flat gradient, so that the gradient is a view of it.
// Backward steps get their destination from the tape's GradDst instead,
// which spares an op output's gradient the zeroing.
func (t *Of[T]) EnsureGrad() Storage[T] {
	if t.GradStore == nil {
		if t.arena != nil {
			g := t.arena.EnsureGrad()
			if t.GradStore == nil { // a Span: its range of the flat gradient
				t.GradStore = g.Slice(t.off, t.off+t.Numel())
			}
			return t.GradStore
		}
		t.GradStore, t.ownGrad = t.Store.Like(t.Store.Len()), true
	}
	return t.GradStore
}

// FillNormal sets every element of a host tensor to a draw from N(mean, std²).
func (t *Of[T]) FillNormal(rng *rand.Rand, mean, std float64) {
	d := t.Data()
	for i := range d {
		d[i] = T(mean + std*rng.NormFloat64())
	}
}

// normalChunk is the elements FillNormalSeeded draws from one stream.
const normalChunk = 1 << 20

// FillNormalSeeded fills a host tensor with mean + std·N(0, 1) draws, chunk
// c of normalChunk elements from its own PCG stream (seed, c), the chunks on
// GOMAXPROCS goroutines: the values depend on the seed alone, not on the
// goroutine count, and a billion parameters take a fraction of a second
// instead of seconds.
func (t *Of[T]) FillNormalSeeded(seed uint64, mean, std float64) {
	d := t.Data()
	chunks := (len(d) + normalChunk - 1) / normalChunk
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(chunks, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for c := int(next.Add(1) - 1); c < chunks; c = int(next.Add(1) - 1) {
				rng := rand.New(rand.NewPCG(seed, uint64(c)))
				for i := c * normalChunk; i < min(len(d), (c+1)*normalChunk); i++ {
					d[i] = T(mean + std*rng.NormFloat64())
				}
			}
		})
	}
	wg.Wait()
}

// Fill sets every element of a host tensor to v.
func (t *Of[T]) Fill(v float64) {
	d := t.Data()
	for i := range d {
		d[i] = T(v)
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
