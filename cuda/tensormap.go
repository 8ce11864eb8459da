package cuda

import (
	"fmt"
	"unsafe"
)

// TensorMap is a CUtensorMap: the description of a tiled global-memory
// tensor that the tensor memory accelerator (TMA) copies boxes of into
// shared memory. Kernels take it by value as a __grid_constant__ parameter
// (Args.TensorMap). The driver wants it 64-byte aligned, which Go cannot
// declare, so it lives at an aligned offset of a larger heap array.
type TensorMap struct {
	buf *[24]uint64
}

// NewTensorMap returns an empty tensor map.
func NewTensorMap() *TensorMap { return &TensorMap{buf: new([24]uint64)} }

// ptr returns the 64-byte aligned 128 bytes of m (heap memory does not move).
func (m *TensorMap) ptr() unsafe.Pointer {
	p := uintptr(unsafe.Pointer(&m.buf[0]))
	return unsafe.Add(unsafe.Pointer(&m.buf[0]), (64-p%64)%64)
}

// TensorMapDataType is a CUtensorMapDataType.
type TensorMapDataType uint32

// Element types of tensor maps.
const (
	TensorMapFloat16  TensorMapDataType = 6
	TensorMapFloat32  TensorMapDataType = 7
	TensorMapBFloat16 TensorMapDataType = 9
)

// TensorMapSwizzle is a CUtensorMapSwizzle: how the rows of a box are laid
// out in shared memory.
type TensorMapSwizzle uint32

// Swizzle128B stores 16-byte chunk c of row r at chunk c ^ (r % 8) within
// 1024-byte groups of 8 rows of 128 bytes, as warpgroup MMA reads.
const Swizzle128B TensorMapSwizzle = 3

// EncodeTiled describes in m a tensor at addr of element type dt with
// extents dims (innermost first), byte strides of dimensions 1 and up
// (len(dims)-1 values, multiples of 16), copied in boxes of box elements
// (innermost first; box[0] times the element size at most 128 bytes with
// Swizzle128B). Elements outside the extents arrive as zeros in copies to
// shared memory and are left alone by copies and reductions to global.
func EncodeTiled(m *TensorMap, dt TensorMapDataType, addr DevicePtr, dims, strides []uint64, box []uint32, sw TensorMapSwizzle) error {
	rank := len(dims)
	if rank < 1 || rank > 5 || len(strides) != rank-1 || len(box) != rank {
		return fmt.Errorf("cuTensorMapEncodeTiled: rank %d with %d strides and %d box sizes", rank, len(strides), len(box))
	}
	if addr%16 != 0 {
		return fmt.Errorf("cuTensorMapEncodeTiled: address %#x is not 16-byte aligned", uint64(addr))
	}
	for i, s := range strides {
		if s%16 != 0 {
			return fmt.Errorf("cuTensorMapEncodeTiled: stride %d of dimension %d is not a multiple of 16 bytes", s, i+1)
		}
	}
	// Heap copies: the driver reads them during the call.
	a := &struct {
		dims, strides [5]uint64
		box, elem     [5]uint32
	}{}
	copy(a.dims[:], dims)
	copy(a.strides[:], strides)
	copy(a.box[:], box)
	for i := range rank {
		a.elem[i] = 1
	}
	const interleaveNone, l2Promote128, oobZero = 0, 2, 0
	err := drv(pTensorMapEncodeTiled, uintptr(m.ptr()), uintptr(dt), uintptr(rank), uintptr(addr),
		uintptr(unsafe.Pointer(&a.dims[0])), uintptr(unsafe.Pointer(&a.strides[0])),
		uintptr(unsafe.Pointer(&a.box[0])), uintptr(unsafe.Pointer(&a.elem[0])),
		interleaveNone, uintptr(sw), l2Promote128, oobZero)
	if err != nil {
		return fmt.Errorf("tensor map dims %v strides %v box %v: %w", dims, strides, box, err)
	}
	return nil
}
