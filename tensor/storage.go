package tensor

import (
	"fmt"

	"dflash/dtype"
	"dflash/flex"
)

// Storage is the elements of a tensor, held by a backend: host memory on the
// CPU (Host), a device buffer on the CUDA backend. A Storage is a view:
// Slice shares the elements, and copying a Storage value copies no elements.
type Storage[T Float] interface {
	// Len returns the number of elements.
	Len() int
	// DType returns the stored element type: T's own on the CPU; bf16 for
	// activations and f32 for statistics, master weights and parameter
	// gradients on CUDA.
	DType() dtype.DType
	// Slice returns the view of elements [lo, hi).
	Slice(lo, hi int) Storage[T]
	// Like returns n new zero elements of the same dtype on the same backend
	// (a gradient's storage).
	Like(n int) Storage[T]
	// LikeOut returns n elements as Like does (same dtype, backend and
	// lifetime) with undefined contents, for a gradient that a backward
	// step writes whole before anything reads it (Like on the CPU; on a
	// device it spares Like's memset).
	LikeOut(n int) Storage[T]
}

// Ints is int32 data held by a backend: token ids, targets, row indices,
// argmaxes.
type Ints interface {
	Len() int
	Slice(lo, hi int) Ints
}

// Mask is a block mask built by a backend (Backend.NewMask) for the
// attention dimensions it reports.
type Mask interface {
	// MaskDims returns the dimensions the mask was built for.
	MaskDims() flex.Dims
	// MaskArgs returns the program arguments the mask was built with (the
	// attention's score program reads them too).
	MaskArgs() *flex.Args
}

// Host is the CPU backend's storage: a Go slice.
type Host[T Float] []T

// Len returns len(h).
func (h Host[T]) Len() int { return len(h) }

// DType returns dtype.F32 or dtype.F64.
func (h Host[T]) DType() dtype.DType { return dtypeOf[T]() }

// Slice returns h[lo:hi], capped so that an append cannot spill past hi.
func (h Host[T]) Slice(lo, hi int) Storage[T] { return h[lo:hi:hi] }

// Like returns make(Host[T], n).
func (h Host[T]) Like(n int) Storage[T] { return make(Host[T], n) }

// LikeOut returns make(Host[T], n) (Like).
func (h Host[T]) LikeOut(n int) Storage[T] { return h.Like(n) }

// HostInts is the CPU backend's int32 data.
type HostInts []int32

// Len returns len(h).
func (h HostInts) Len() int { return len(h) }

// Slice returns h[lo:hi].
func (h HostInts) Slice(lo, hi int) Ints { return h[lo:hi:hi] }

// HostMask is the CPU backend's block mask.
type HostMask struct{ *flex.BlockMask }

// MaskDims returns the mask's dimensions.
func (m HostMask) MaskDims() flex.Dims { return m.Dims }

// MaskArgs returns the mask's arguments.
func (m HostMask) MaskArgs() *flex.Args { return m.Args() }

// HostBacked is host storage of another type than Host (a test backend's,
// which keeps account of its allocations): the CPU kernels read and write
// its elements through HostSlice.
type HostBacked[T Float] interface {
	Storage[T]
	HostSlice() []T
}

// HostData returns the host slice of s; it panics, naming what, when s is
// held by a device (a programmer error: host code reads device tensors
// through Backend.Download).
func HostData[T Float](s Storage[T], what string) []T {
	switch h := s.(type) {
	case Host[T]:
		return h
	case nil:
		return nil
	case HostBacked[T]:
		return h.HostSlice()
	}
	panic(fmt.Sprintf("tensor: %s is %s storage on a device, not host memory (read it with Backend.Download)", what, s.DType()))
}

// HostIntData returns the host slice of s; it panics, naming what, when s is
// held by a device.
func HostIntData(s Ints, what string) []int32 {
	switch h := s.(type) {
	case HostInts:
		return h
	case nil:
		return nil
	}
	panic(fmt.Sprintf("tensor: %s is int32 data on a device, not host memory", what))
}

// dtypeOf returns the dtype of T.
func dtypeOf[T Float]() dtype.DType {
	var z T
	if _, ok := any(z).(float32); ok {
		return dtype.F32
	}
	return dtype.F64
}
