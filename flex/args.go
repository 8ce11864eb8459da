package flex

import (
	"fmt"
	"maps"
	"slices"
)

// Args holds the run-time values that programs read by name: scalars (for
// example a context length) and tensors (document ids, anchors, bias tables).
// Changing them never changes a program's structure or hash.
type Args struct {
	Ints         map[string]int
	Floats       map[string]float64
	IntTensors   map[string]IntTensor
	FloatTensors map[string]FloatTensor
	// Check turns on the checked mode for calls with these Args (as
	// DFLASH_FLEX_CHECK=1 does for every call): an out-of-range tensor
	// index is reported as an *IndexError instead of being clamped
	// silently; see the package doc.
	Check bool
}

// IntTensor is a row-major int32 tensor.
type IntTensor struct {
	Shape []int
	Data  []int32
}

// FloatTensor is a row-major float64 tensor.
type FloatTensor struct {
	Shape []int
	Data  []float64
}

// NewArgs returns empty Args.
func NewArgs() *Args {
	return &Args{Ints: map[string]int{}, Floats: map[string]float64{},
		IntTensors: map[string]IntTensor{}, FloatTensors: map[string]FloatTensor{}}
}

// SetInt sets the int scalar name and returns a.
func (a *Args) SetInt(name string, v int) *Args {
	put(&a.Ints, name, v)
	return a
}

// SetFloat sets the float scalar name and returns a.
func (a *Args) SetFloat(name string, v float64) *Args {
	put(&a.Floats, name, v)
	return a
}

// SetIntTensor sets the int tensor name (data row-major with the given shape)
// and returns a. It panics when len(data) does not match the shape.
func (a *Args) SetIntTensor(name string, data []int32, shape ...int) *Args {
	checkShape(name, len(data), shape)
	put(&a.IntTensors, name, IntTensor{Shape: slices.Clone(shape), Data: data})
	return a
}

// SetFloatTensor sets the float tensor name and returns a.
func (a *Args) SetFloatTensor(name string, data []float64, shape ...int) *Args {
	checkShape(name, len(data), shape)
	put(&a.FloatTensors, name, FloatTensor{Shape: slices.Clone(shape), Data: data})
	return a
}

// put sets (*m)[name] = v, making the map when it is nil.
func put[V any](m *map[string]V, name string, v V) {
	if *m == nil {
		*m = map[string]V{}
	}
	(*m)[name] = v
}

func checkShape(name string, n int, shape []int) {
	size := 1
	for _, s := range shape {
		if s < 1 {
			panic(fmt.Sprintf("flex: tensor %q: shape %v has a dimension < 1", name, shape))
		}
		size *= s
	}
	if len(shape) == 0 || size != n {
		panic(fmt.Sprintf("flex: tensor %q: shape %v needs %d elements, data has %d", name, shape, size, n))
	}
}

// boundTensor is a tensor resolved for evaluation.
type boundTensor struct {
	name    string
	shape   []int
	strides []int
	idata   []int32
	fdata   []float64
	rmq     *rangeTable // built lazily by the block-mask builder
}

// offset returns the row-major offset of the element at index idx[args[d]]
// in dimension d, each index clamped into range.
func (t *boundTensor) offset(idx []int64, args []int) int {
	off := 0
	for d, x := range args {
		off += clampIndex(idx[x], t.shape[d]) * t.strides[d]
	}
	return off
}

// offsetAt is offset for position k of vector indices: idx[args[d]][k].
func (t *boundTensor) offsetAt(idx [][]int64, args []int, k int) int {
	off := 0
	for d, x := range args {
		off += clampIndex(idx[x][k], t.shape[d]) * t.strides[d]
	}
	return off
}

// frame is a program's parameters resolved from Args, indexed like plan.params.
type frame struct {
	ints    []int64
	floats  []float64
	tensors []*boundTensor
	check   *indexCheck // nil unless in the checked mode
}

// bind resolves the parameters of p from a. It returns an error naming any
// missing parameter or wrong rank.
func bind(p *plan, what string, a *Args) (*frame, error) {
	f := &frame{ints: make([]int64, len(p.params)), floats: make([]float64, len(p.params)),
		tensors: make([]*boundTensor, len(p.params))}
	if a == nil {
		a = &Args{}
	}
	checked, err := checkedMode(a)
	if err != nil {
		return nil, err
	}
	if checked {
		f.check = &indexCheck{what: what}
	}
	for i, prm := range p.params {
		switch prm.Kind {
		case ParamIntScalar:
			v, ok := a.Ints[prm.Name]
			if !ok {
				return nil, fmt.Errorf("flex: %s reads int scalar %q, missing from Args.Ints (have %v)", what, prm.Name, slices.Sorted(maps.Keys(a.Ints)))
			}
			f.ints[i] = int64(v)
		case ParamFloatScalar:
			v, ok := a.Floats[prm.Name]
			if !ok {
				return nil, fmt.Errorf("flex: %s reads float scalar %q, missing from Args.Floats (have %v)", what, prm.Name, slices.Sorted(maps.Keys(a.Floats)))
			}
			f.floats[i] = v
		case ParamIntTensor:
			t, ok := a.IntTensors[prm.Name]
			if !ok {
				return nil, fmt.Errorf("flex: %s reads int tensor %q (rank %d), missing from Args.IntTensors (have %v)", what, prm.Name, prm.Rank, slices.Sorted(maps.Keys(a.IntTensors)))
			}
			if err := checkBound(what, prm, t.Shape, len(t.Data)); err != nil {
				return nil, err
			}
			f.tensors[i] = &boundTensor{name: prm.Name, shape: t.Shape, strides: strides(t.Shape), idata: t.Data}
		case ParamFloatTensor:
			t, ok := a.FloatTensors[prm.Name]
			if !ok {
				return nil, fmt.Errorf("flex: %s reads float tensor %q (rank %d), missing from Args.FloatTensors (have %v)", what, prm.Name, prm.Rank, slices.Sorted(maps.Keys(a.FloatTensors)))
			}
			if err := checkBound(what, prm, t.Shape, len(t.Data)); err != nil {
				return nil, err
			}
			f.tensors[i] = &boundTensor{name: prm.Name, shape: t.Shape, strides: strides(t.Shape), fdata: t.Data}
		}
	}
	return f, nil
}

func checkBound(what string, prm Param, shape []int, n int) error {
	if len(shape) != prm.Rank {
		return fmt.Errorf("flex: %s reads tensor %q with rank %d, Args gives shape %v", what, prm.Name, prm.Rank, shape)
	}
	size := 1
	for _, s := range shape {
		if s < 1 {
			return fmt.Errorf("flex: %s: tensor %q has shape %v with a dimension < 1", what, prm.Name, shape)
		}
		size *= s
	}
	if size != n {
		return fmt.Errorf("flex: %s: tensor %q has shape %v (%d elements) but %d values", what, prm.Name, shape, size, n)
	}
	return nil
}

func strides(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// clampIndex clamps i into [0, n-1].
func clampIndex(i int64, n int) int {
	if i < 0 {
		return 0
	}
	if i >= int64(n) {
		return n - 1
	}
	return int(i)
}
