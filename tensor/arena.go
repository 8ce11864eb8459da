package tensor

import (
	"fmt"
	"slices"
	"strings"

	"dflash/dtype"
)

// Arena holds the parameters of one model in one flat buffer (llm.c's
// malloc_and_point_parameters): parameter i's values are the view
// [Offset(i), Offset(i)+Numel) of Compute, and once gradients exist its
// gradient is the same range of Grad. An optimizer, an all-reduce and a
// checkpoint can then treat the model as one buffer while the model code
// keeps its named tensors.
//
// Declare every parameter with Param, in the order Params should list them,
// then call Alloc once: the arena is then in host memory, where models are
// initialised and loaded. Place moves it to a backend.
type Arena[T Float] struct {
	// Values holds every parameter's master values, in declaration order
	// (nil for a frozen arena placed on a device: it keeps Compute only).
	Values Storage[T]
	// Compute is what ops read: Values itself on the CPU, a bf16 copy on
	// CUDA that the optimizer refreshes.
	Compute Storage[T]
	// Grad holds every gradient in the same layout, as Values' dtype; nil
	// until EnsureGrad (or the EnsureGrad of any of its parameters)
	// allocates it.
	Grad Storage[T]

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
	t := &Of[T]{Name: name, Shape: append([]int(nil), shape...), RequiresGrad: true, arena: a, off: a.size}
	a.params = append(a.params, t)
	a.offs = append(a.offs, a.size)
	a.size += numel(shape)
	return t
}

// Alloc allocates the values of every declared parameter in host memory and
// points each parameter at its range. It panics when called twice.
func (a *Arena[T]) Alloc() {
	if a.alloc {
		panic("tensor.Arena: Alloc called twice")
	}
	a.alloc = true
	a.Values = make(Host[T], a.size)
	a.Compute = a.Values
	a.point()
}

// Place moves the arena to backend b, keeping master values when master is
// set (a model that trains) and only the compute copy otherwise (a frozen
// model). The arena must be in host memory without gradients. On a backend
// whose parameters are host memory (Backend.HostParams: the CPU) nothing
// moves.
func (a *Arena[T]) Place(b Backend[T], master bool) {
	if b.HostParams() {
		return
	}
	a.place(b, func() error { a.AllocOn(b, master); return nil })
}

// PlaceFP8 is Place(b, false), a frozen model's arena, with the matrices
// fp8 held in FP8 (AllocOnFP8). It returns AllocOnFP8's error, the arena
// then left in host memory.
func (a *Arena[T]) PlaceFP8(b Backend[T], fp8 []*Of[T]) error {
	if b.HostParams() {
		return fmt.Errorf("tensor: FP8 parameters need a device backend, not %s", b.Name())
	}
	return a.place(b, func() error { return a.AllocOnFP8(b, fp8) })
}

// place moves the host arena to b: alloc allocates it there, then every
// parameter is written with SetParam.
func (a *Arena[T]) place(b Backend[T], alloc func() error) error {
	if a.Grad != nil {
		panic("tensor.Arena: Place with gradients")
	}
	host := HostData(a.Values, "tensor.Arena values")
	a.alloc = false
	if err := alloc(); err != nil {
		a.alloc = true
		return err
	}
	for i := range a.params {
		a.SetParam(b, i, host[a.offs[i]:a.offs[i]+numel(a.params[i].Shape)])
	}
	return nil
}

// AllocOn is Alloc on backend b: the parameters are allocated there
// (Backend.AllocParams; master values only with master, on a device) and
// are then written one by one with SetParam, so that a model loads into
// device memory without a host copy of the whole.
func (a *Arena[T]) AllocOn(b Backend[T], master bool) {
	if a.alloc {
		panic("tensor.Arena: AllocOn after Alloc")
	}
	a.alloc = true
	a.Values, a.Compute = b.AllocParams(a.size, master)
	a.point()
}

// AllocOnFP8 is AllocOn(b, false) for a frozen arena whose matrices fp8
// (2-D parameters of this arena) are held in OCP FP8 E4M3 with a float32
// scale per row (FP8Params): SetParam and SetParamBytes quantize them as
// they are written, whole rows at a time, and they serve only as the
// weight W of products x·Wᵀ (Backend.Gemm and GemmAdd with transB), in
// FP8. It is an error when b cannot hold FP8 parameters or a matrix is
// not of this arena.
func (a *Arena[T]) AllocOnFP8(b Backend[T], fp8 []*Of[T]) error {
	if a.alloc {
		panic("tensor.Arena: AllocOnFP8 after Alloc")
	}
	fb, ok := b.(FP8Params[T])
	if !ok {
		return fmt.Errorf("tensor: backend %s cannot hold FP8 parameters", b.Name())
	}
	segs := make([]Segment, len(fp8))
	for i, t := range fp8 {
		if t.arena != a || len(t.Shape) != 2 {
			return fmt.Errorf("tensor: FP8 parameter %v is not a matrix of this arena", t)
		}
		segs[i] = Segment{Off: t.off, Len: t.Numel(), Cols: t.Shape[1]}
	}
	slices.SortFunc(segs, func(x, y Segment) int { return x.Off - y.Off })
	compute, err := fb.AllocParamsFP8(a.size, segs)
	if err != nil {
		return err
	}
	a.alloc = true
	a.Values, a.Compute = nil, compute
	a.point()
	return nil
}

// OperandAlloc is an optional Backend method: storage for a rows×cols
// result that an op writes whole and only products with the weight w read,
// as their A operand (x·wᵀ, w with rows of cols). A backend that holds w in
// FP8 (FP8Params) hands out the operand's quantized form, which the ops
// that produce it (RMSNorm, SwiGLUPacked) write directly; for any other w
// it is AllocOut's. Tapes use it where the operand's only readers are such
// products (RMSNormFor, MLP).
type OperandAlloc[T Float] interface {
	AllocOperand(rows, cols int, w Storage[T]) Storage[T]
}

// allocOperand returns the backend's OperandAlloc storage for a rows×cols
// A operand of products with w, or AllocOut's.
func (tp *TapeOf[T]) allocOperand(rows, cols int, w *Of[T]) Storage[T] {
	if oa, ok := tp.b.(OperandAlloc[T]); ok {
		return oa.AllocOperand(rows, cols, w.Store)
	}
	return tp.b.AllocOut(rows * cols)
}

// FP8Params is a backend that can hold a frozen arena's matrices in OCP
// FP8 E4M3 with one float32 scale per row (the CUDA backend): the frozen
// target's forward then runs its products in FP8 (Arena.AllocOnFP8).
type FP8Params[T Float] interface {
	// AllocParamsFP8 returns the compute storage of a frozen arena of n
	// elements whose segments fp8 (ascending, disjoint, each whole rows)
	// are held in FP8 and the rest in the backend's compute dtype. A Slice
	// of it lies in consecutive FP8 segments of one row length, whole rows,
	// or outside every FP8 segment; its FP8 views serve only as the
	// weight of x·Wᵀ products. An error names a segment that cannot be
	// held (a row length FP8 products refuse).
	AllocParamsFP8(n int, fp8 []Segment) (Storage[T], error)
}

// Segment is elements [Off, Off+Len) of an arena: a matrix of rows of Cols
// elements.
type Segment struct{ Off, Len, Cols int }

// SetParam sets the values of parameter i (in declaration order) to host
// on backend b, where the arena was allocated: its master range and its
// compute copy's (one range on the CPU, where they are one).
func (a *Arena[T]) SetParam(b Backend[T], i int, host []T) {
	checkLen("Arena.SetParam "+a.params[i].Name, len(host), numel(a.params[i].Shape))
	if a.Values != nil {
		b.WriteParams(a.view(a.Values, i), host)
	}
	if a.Values == nil || !a.computeIsValues() {
		b.WriteParams(a.view(a.Compute, i), host)
	}
}

// SetParamBytes sets elements [off, off+n) of parameter i to raw, the
// little-endian bytes of n elements of dtype dt (n = len(raw)/dt.Size()),
// on backend b, where the arena was allocated: its master range and its
// compute copy's, each converted by Backend.WriteParamBytes (a compute
// copy of dtype dt takes the bytes as they are). A model loads a weight
// in pieces with it, straight from its file's bytes.
func (a *Arena[T]) SetParamBytes(b Backend[T], i, off int, dt dtype.DType, raw []byte) {
	p := a.params[i]
	n := len(raw) / dt.Size()
	if n*dt.Size() != len(raw) || off < 0 || off+n > numel(p.Shape) {
		panic(fmt.Sprintf("tensor.Arena.SetParamBytes %s: %d bytes of %v at element %d of %d", p.Name, len(raw), dt, off, numel(p.Shape)))
	}
	lo := a.offs[i] + off
	if a.Values != nil {
		b.WriteParamBytes(a.Values.Slice(lo, lo+n), dt, raw)
	}
	if a.Values == nil || !a.computeIsValues() {
		b.WriteParamBytes(a.Compute.Slice(lo, lo+n), dt, raw)
	}
}

// computeIsValues reports whether the compute copy is the master values
// themselves (host parameters: Alloc's, or the CPU's AllocParams).
func (a *Arena[T]) computeIsValues() bool {
	v, vok := a.Values.(Host[T])
	c, cok := a.Compute.(Host[T])
	return vok && cok && len(v) == len(c) && (len(v) == 0 || &v[0] == &c[0])
}

// Fetch brings a placed arena's master values back to host memory through
// b (waiting for the device), dropping its gradient: after it the arena is
// as Alloc left it, holding the trained values (export, evaluation on the
// CPU). On an arena in host memory it does nothing.
func (a *Arena[T]) Fetch(b Backend[T]) {
	if _, host := a.Values.(Host[T]); host {
		return
	}
	if a.Values == nil {
		panic("tensor.Arena: Fetch of a frozen arena (it keeps no master values)")
	}
	v := make(Host[T], a.size)
	b.Download(a.Values, v)
	a.Values, a.Compute, a.Grad = v, v, nil
	for _, t := range a.params {
		t.GradStore = nil
	}
	a.point()
}

// point points every parameter's values at its range of Compute.
func (a *Arena[T]) point() {
	for i, t := range a.params {
		t.Store = a.view(a.Compute, i)
	}
}

// EnsureGrad allocates the flat gradient (zero, alike Values) if there is
// none, points every parameter's gradient at its range and returns it. A
// parameter whose gradient was dropped gets its view back; a host gradient
// that a parameter held before the flat one existed is copied into its range.
func (a *Arena[T]) EnsureGrad() Storage[T] {
	if !a.alloc {
		panic("tensor.Arena: EnsureGrad before Alloc")
	}
	if a.Values == nil {
		panic("tensor.Arena: EnsureGrad on a frozen arena")
	}
	fresh := a.Grad == nil
	if fresh {
		a.Grad = a.Values.Like(a.size)
	}
	for i, t := range a.params {
		if fresh || t.GradStore == nil {
			g := a.view(a.Grad, i)
			if t.GradStore != nil {
				copy(HostData(g, t.Name+".grad"), HostData(t.GradStore, t.Name+".grad"))
			}
			t.GradStore = g
		}
	}
	return a.Grad
}

// ZeroGrad clears a host flat gradient (keeping its storage); on a device
// use the backend's Fill.
func (a *Arena[T]) ZeroGrad() {
	if a.Grad != nil {
		clear(HostData(a.Grad, "tensor.Arena gradient"))
	}
}

// view returns parameter i's range of buf.
func (a *Arena[T]) view(buf Storage[T], i int) Storage[T] {
	return buf.Slice(a.offs[i], a.offs[i]+numel(a.params[i].Shape))
}

// Params returns the declared parameters in declaration order.
func (a *Arena[T]) Params() []*Of[T] { return append([]*Of[T](nil), a.params...) }

// Offset returns the offset of the i-th declared parameter in Values and Grad.
func (a *Arena[T]) Offset(i int) int { return a.offs[i] }

// Len returns the total number of parameter elements.
func (a *Arena[T]) Len() int { return a.size }

// HostValues returns the master values of an arena in host memory; it
// panics for an arena placed on a device.
func (a *Arena[T]) HostValues() []T { return HostData(a.Values, "tensor.Arena values") }

// HostGrad returns the flat gradient of an arena in host memory (nil before
// EnsureGrad); it panics for an arena placed on a device.
func (a *Arena[T]) HostGrad() []T { return HostData(a.Grad, "tensor.Arena gradient") }

// Span returns the parameters ts, declared one after another in one arena
// and alike but for their first dimension, as one tensor: the
// concatenation along that dimension, viewing the same values, whose
// gradient is the matching range of the arena's flat gradient (so a Linear
// of a Span writes every parameter's gradient in one GEMM). Make a Span
// where it is used, after the arena is placed: it views the storage the
// parameters have then. It panics unless the parameters are adjacent in
// their arena, alike and of one RequiresGrad.
func Span[T Float](ts ...*Of[T]) *Of[T] {
	if len(ts) == 0 {
		panic("tensor.Span: no parameters")
	}
	first, end := ts[0], ts[0].off
	shape := append([]int(nil), first.Shape...)
	shape[0] = 0
	names := make([]string, len(ts))
	for i, t := range ts {
		switch {
		case t.arena == nil || t.arena != first.arena || !first.arena.alloc:
			panic(fmt.Sprintf("tensor.Span: %v is not an allocated parameter of %v's arena", t, first))
		case t.off != end:
			panic(fmt.Sprintf("tensor.Span: %v does not follow %v in its arena", t, ts[max(i-1, 0)]))
		case len(t.Shape) == 0 || !slices.Equal(t.Shape[1:], first.Shape[1:]):
			panic(fmt.Sprintf("tensor.Span: %v and %v differ beyond the first dimension", t, first))
		case t.RequiresGrad != first.RequiresGrad:
			panic(fmt.Sprintf("tensor.Span: %v and %v differ in RequiresGrad", t, first))
		}
		end += t.Numel()
		shape[0] += t.Shape[0]
		names[i] = t.Name
	}
	a := first.arena
	return &Of[T]{Name: strings.Join(names, "+"), Shape: shape, Store: a.Compute.Slice(first.off, end),
		RequiresGrad: first.RequiresGrad, arena: a, off: first.off}
}
