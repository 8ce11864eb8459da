package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// FunctionAttribute is a CUfunction_attribute.
type FunctionAttribute int32

// Function attributes.
const (
	FuncMaxThreadsPerBlock      FunctionAttribute = 0
	FuncSharedSizeBytes         FunctionAttribute = 1 // static shared memory
	FuncConstSizeBytes          FunctionAttribute = 2
	FuncLocalSizeBytes          FunctionAttribute = 3 // per-thread local memory (spills)
	FuncNumRegs                 FunctionAttribute = 4
	FuncPTXVersion              FunctionAttribute = 5
	FuncBinaryVersion           FunctionAttribute = 6
	FuncMaxDynamicSharedSize    FunctionAttribute = 8 // settable: opt in to more than 48 KiB
	FuncPreferredSharedCarveout FunctionAttribute = 9
)

// ModuleLoadData loads a CUBIN, fatbin or PTX image into the current context.
// A PTX image without a trailing NUL is copied and terminated.
func ModuleLoadData(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, fmt.Errorf("cuModuleLoadData: empty image")
	}
	isELF := len(image) >= 4 && string(image[:4]) == "\x7fELF"
	if !isELF && image[len(image)-1] != 0 {
		image = append(append(make([]byte, 0, len(image)+1), image...), 0)
	}
	var m uintptr
	err := drv(pModuleLoadData, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&image[0])))
	return Module(m), err
}

// ModuleUnload unloads m.
func ModuleUnload(m Module) error { return drv(pModuleUnload, uintptr(m)) }

// ModuleGetFunction returns the kernel named name (an extern "C" name or a
// mangled one) in m.
func ModuleGetFunction(m Module, name string) (Function, error) {
	var f uintptr
	n := cStr(name)
	if err := drv(pModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&n[0]))); err != nil {
		return 0, fmt.Errorf("kernel %q: %w", name, err)
	}
	return Function(f), nil
}

// FuncName returns f's name (its mangled name for a C++ kernel), or "" when
// the driver cannot say.
func FuncName(f Function) string {
	var p uintptr
	if drv(pFuncGetName, uintptr(unsafe.Pointer(&p)), uintptr(f)) != nil || p == 0 {
		return ""
	}
	return cString(p)
}

// ModuleGetGlobal returns the address and size in bytes of the __device__
// variable named name (an extern "C" or unmangled name) in m.
func ModuleGetGlobal(m Module, name string) (DevicePtr, int64, error) {
	var p uintptr
	var size uint64
	n := cStr(name)
	if err := drv(pModuleGetGlobal, uintptr(unsafe.Pointer(&p)), uintptr(unsafe.Pointer(&size)), uintptr(m), uintptr(unsafe.Pointer(&n[0]))); err != nil {
		return 0, 0, fmt.Errorf("global %q: %w", name, err)
	}
	return DevicePtr(p), int64(size), nil
}

// FuncGetAttribute returns an attribute of f.
func FuncGetAttribute(f Function, a FunctionAttribute) (int, error) {
	var v int32
	err := drv(pFuncGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(f))
	return int(v), err
}

// FuncSetAttribute sets an attribute of f, e.g. FuncMaxDynamicSharedSize.
func FuncSetAttribute(f Function, a FunctionAttribute, v int) error {
	return drv(pFuncSetAttribute, uintptr(f), uintptr(a), uintptr(v))
}

// Dim3 is a grid or block size.
type Dim3 struct{ X, Y, Z uint32 }

// Dim returns a Dim3 with unset (zero) dimensions taken as 1.
func Dim(x, y, z uint32) Dim3 {
	if y == 0 {
		y = 1
	}
	if z == 0 {
		z = 1
	}
	return Dim3{x, y, z}
}

// MaxKernelArgs is the most arguments an Args holds (the flex backward with
// a producer warpgroup and bulk dQ adds takes 24 fixed ones before its
// programs' slots).
const MaxKernelArgs = 48

// Args is a reusable kernel argument list. Each argument takes an 8-byte
// slot, so scalars up to 8 bytes and device pointers are supported. Keep one
// Args per call site and Reset it: it lives on the heap, so launching with
// it allocates nothing.
type Args struct {
	vals [MaxKernelArgs]uint64
	ptrs [MaxKernelArgs]unsafe.Pointer
	n    int
	maps []*TensorMap // a Clone's own tensor maps, kept alive with it
}

// NewArgs returns an empty argument list.
func NewArgs() *Args { return new(Args) }

// Reset empties a and returns it.
func (a *Args) Reset() *Args { a.n = 0; return a }

// Len returns the number of arguments.
func (a *Args) Len() int { return a.n }

func (a *Args) push(v uint64) *Args {
	if a.n == MaxKernelArgs {
		panic(fmt.Sprintf("cuda: more than %d kernel arguments", MaxKernelArgs))
	}
	a.vals[a.n] = v
	a.ptrs[a.n] = unsafe.Pointer(&a.vals[a.n])
	a.n++
	return a
}

// Ptr appends a device pointer argument.
func (a *Args) Ptr(p DevicePtr) *Args { return a.push(uint64(p)) }

// I32 appends an int argument.
func (a *Args) I32(v int32) *Args { return a.push(uint64(uint32(v))) }

// U32 appends an unsigned int argument.
func (a *Args) U32(v uint32) *Args { return a.push(uint64(v)) }

// I64 appends a long long argument.
func (a *Args) I64(v int64) *Args { return a.push(uint64(v)) }

// F32 appends a float argument.
func (a *Args) F32(v float32) *Args { return a.push(uint64(math.Float32bits(v))) }

// TensorMap appends a CUtensorMap argument (a __grid_constant__ parameter
// of 128 bytes). The launch copies it: m must stay unchanged until the
// launch call returns.
func (a *Args) TensorMap(m *TensorMap) *Args {
	a.push(0)
	a.ptrs[a.n-1] = m.ptr()
	return a
}

// isMap reports whether argument i is a tensor map (its pointer is not
// to its own value).
func (a *Args) isMap(i int) bool { return a.ptrs[i] != unsafe.Pointer(&a.vals[i]) }

// AppendBytes appends the argument values to dst, a tensor map's 128
// bytes in place of its pointer: two lists that append the same bytes
// launch a kernel the same way.
func (a *Args) AppendBytes(dst []byte) []byte {
	for i := range a.n {
		if a.isMap(i) {
			dst = append(dst, unsafe.Slice((*byte)(a.ptrs[i]), 128)...)
			continue
		}
		dst = binary.LittleEndian.AppendUint64(dst, a.vals[i])
	}
	return dst
}

// Clone returns a copy of a that owns its values and tensor maps, for a
// launch queued after a's owner has changed or dropped them.
func (a *Args) Clone() *Args {
	c := &Args{n: a.n, vals: a.vals}
	for i := range a.n {
		if a.isMap(i) {
			m := NewTensorMap()
			copy(unsafe.Slice((*byte)(m.ptr()), 128), unsafe.Slice((*byte)(a.ptrs[i]), 128))
			c.ptrs[i] = m.ptr()
			c.maps = append(c.maps, m)
			continue
		}
		c.ptrs[i] = unsafe.Pointer(&c.vals[i])
	}
	return c
}

// F64 appends a double argument.
func (a *Args) F64(v float64) *Args { return a.push(math.Float64bits(v)) }

// LaunchKernel queues f on s with the given grid, block, dynamic shared
// memory and arguments (args may be nil for a kernel without parameters).
func LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, args *Args) error {
	var params unsafe.Pointer
	if args != nil && args.n > 0 {
		params = unsafe.Pointer(&args.ptrs[0])
	}
	return drv(pLaunchKernel, uintptr(f),
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(sharedMem), uintptr(s), uintptr(params), 0)
}
