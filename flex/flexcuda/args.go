package flexcuda

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"dflash/flex"
	"dflash/gpu"
)

// Tensor is a device tensor read by a program: row-major int32 (Float
// false) or float32 values in Buf with the given shape.
type Tensor struct {
	Buf   gpu.Buffer
	Shape []int
	Float bool
}

func (t Tensor) elems() int {
	n := 1
	for _, s := range t.Shape {
		n *= s
	}
	return n
}

// Args are the run-time values of the programs' parameters on one device:
// the GPU counterpart of flex.Args. Changing them never recompiles anything.
// Tensors may be uploaded from a flex.Args (UploadArgs) or be device buffers
// the caller owns (SetTensor), e.g. anchors written by a previous kernel.
type Args struct {
	ints    map[string]int
	floats  map[string]float64
	tensors map[string]Tensor
	owned   []gpu.Buffer
}

// NewArgs returns empty Args.
func NewArgs() *Args {
	return &Args{ints: map[string]int{}, floats: map[string]float64{}, tensors: map[string]Tensor{}}
}

// SetInt sets the int scalar name and returns a.
func (a *Args) SetInt(name string, v int) *Args { a.ints[name] = v; return a }

// SetFloat sets the float scalar name and returns a.
func (a *Args) SetFloat(name string, v float64) *Args { a.floats[name] = v; return a }

// SetTensor sets the tensor name to a device buffer the caller owns and
// returns a. It panics when the buffer is smaller than the shape needs.
func (a *Args) SetTensor(name string, t Tensor) *Args {
	if need := int64(4 * t.elems()); len(t.Shape) == 0 || need > t.Buf.Size {
		panic(fmt.Sprintf("flexcuda: tensor %q: shape %v needs %d bytes, buffer has %d", name, t.Shape, need, t.Buf.Size))
	}
	a.tensors[name] = Tensor{Buf: t.Buf, Shape: append([]int(nil), t.Shape...), Float: t.Float}
	return a
}

// Tensor returns the tensor name and whether it is set.
func (a *Args) Tensor(name string) (Tensor, bool) { t, ok := a.tensors[name]; return t, ok }

// Int returns the int scalar name and whether it is set.
func (a *Args) Int(name string) (int, bool) { v, ok := a.ints[name]; return v, ok }

// UploadArgs copies the scalars of h and uploads its tensors to d (int
// tensors as int32, float tensors as float32). Free releases the uploads.
func UploadArgs(d *gpu.Device, h *flex.Args) (*Args, error) {
	a := NewArgs()
	if h == nil {
		return a, nil
	}
	for k, v := range h.Ints {
		a.ints[k] = v
	}
	for k, v := range h.Floats {
		a.floats[k] = v
	}
	for _, name := range slices.Sorted(maps.Keys(h.IntTensors)) {
		t := h.IntTensors[name]
		buf, err := d.Alloc(int64(4 * max(len(t.Data), 1)))
		if err != nil {
			a.Free(d)
			return nil, fmt.Errorf("flexcuda: upload tensor %q: %w", name, err)
		}
		a.owned = append(a.owned, buf)
		if err := gpu.Stage(d, buf, t.Data); err != nil {
			a.Free(d)
			return nil, fmt.Errorf("flexcuda: upload tensor %q: %w", name, err)
		}
		a.tensors[name] = Tensor{Buf: buf, Shape: append([]int(nil), t.Shape...)}
	}
	for _, name := range slices.Sorted(maps.Keys(h.FloatTensors)) {
		t := h.FloatTensors[name]
		f := make([]float32, len(t.Data))
		for i, v := range t.Data {
			f[i] = float32(v)
		}
		buf, err := d.Alloc(int64(4 * max(len(f), 1)))
		if err != nil {
			a.Free(d)
			return nil, fmt.Errorf("flexcuda: upload tensor %q: %w", name, err)
		}
		a.owned = append(a.owned, buf)
		if err := gpu.Stage(d, buf, f); err != nil {
			a.Free(d)
			return nil, fmt.Errorf("flexcuda: upload tensor %q: %w", name, err)
		}
		a.tensors[name] = Tensor{Buf: buf, Shape: append([]int(nil), t.Shape...), Float: true}
	}
	return a, nil
}

// Free releases the buffers UploadArgs made (not those given to SetTensor).
func (a *Args) Free(d *gpu.Device) {
	for i := len(a.owned) - 1; i >= 0; i-- { // last made first: see tensorcuda's ResetStep
		d.Free(a.owned[i])
	}
	a.owned = nil
}

// pack fills slots with the values of l's parameters from a (the backward
// adds the gradient pointers from grads). It returns an error naming a
// missing parameter, a wrong kind or rank, or a value outside int32.
func (l *argLayout) pack(slots []uint64, a *Args, bwd bool, grads map[string]gpu.Buffer) error {
	if a == nil {
		a = NewArgs()
	}
	for i := range slots {
		slots[i] = 0
	}
	put := func(w int, v uint32) {
		s := l.nptr + w/2
		if w%2 == 0 {
			slots[s] |= uint64(v)
		} else {
			slots[s] |= uint64(v) << 32
		}
	}
	for _, p := range l.params {
		w := l.word[p.Name]
		switch p.Kind {
		case flex.ParamIntScalar:
			v, ok := a.ints[p.Name]
			if !ok {
				return fmt.Errorf("flexcuda: the programs read int scalar %q, missing from Args (have %v)", p.Name, slices.Sorted(maps.Keys(a.ints)))
			}
			if v < math.MinInt32 || v > math.MaxInt32 {
				return fmt.Errorf("flexcuda: int scalar %q = %d is outside int32 (CUDA programs use 32-bit ints)", p.Name, v)
			}
			put(w, uint32(int32(v)))
		case flex.ParamFloatScalar:
			v, ok := a.floats[p.Name]
			if !ok {
				return fmt.Errorf("flexcuda: the programs read float scalar %q, missing from Args (have %v)", p.Name, slices.Sorted(maps.Keys(a.floats)))
			}
			put(w, math.Float32bits(float32(v)))
		case flex.ParamIntTensor, flex.ParamFloatTensor:
			t, ok := a.tensors[p.Name]
			if !ok {
				return fmt.Errorf("flexcuda: the programs read %s %q (rank %d), missing from Args (have %v)", p.Kind, p.Name, p.Rank, slices.Sorted(maps.Keys(a.tensors)))
			}
			if t.Float != (p.Kind == flex.ParamFloatTensor) {
				return fmt.Errorf("flexcuda: %s %q given as a tensor of the other element type", p.Kind, p.Name)
			}
			if len(t.Shape) != p.Rank {
				return fmt.Errorf("flexcuda: tensor %q has rank %d in the program, Args give shape %v", p.Name, p.Rank, t.Shape)
			}
			slots[l.ptr[p.Name]] = uint64(t.Buf.Ptr)
			for d, n := range t.Shape {
				if n < 1 || n > math.MaxInt32 {
					return fmt.Errorf("flexcuda: tensor %q: dimension %d is %d", p.Name, d, n)
				}
				put(w+d, uint32(n))
			}
		}
	}
	if bwd {
		for _, name := range l.grads {
			g, ok := grads[name]
			if !ok {
				return fmt.Errorf("flexcuda: the score program reads float tensor %q: the backward needs a gradient buffer for it (Call.TensorGrads)", name)
			}
			t := a.tensors[name]
			if need := int64(4 * t.elems()); g.Size < need {
				panic(fmt.Sprintf("flexcuda: gradient of %q: %d bytes, tensor needs %d", name, g.Size, need))
			}
			slots[l.gslot[name]] = uint64(g.Ptr)
		}
	}
	return nil
}
