package cuda

import "unsafe"

// The driver's virtual memory management (VMM): a range of device addresses
// is reserved first (MemAddressReserve) and backed later, piece by piece, by
// physical allocations (MemCreate) mapped into it (MemMap) and made
// accessible (MemSetAccess). Addresses in the range stay where they are
// while more of it is backed.

// MemHandle is a CUmemGenericAllocationHandle: physical memory from
// MemCreate.
type MemHandle uint64

// CUmemAllocationType, CUmemLocationType and CUmemAccess_flags values.
const (
	memAllocationTypePinned = 1
	memLocationTypeDevice   = 1
	memAccessReadWrite      = 3
)

// AttrVirtualMemoryManagementSupported is
// CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: 1 when the device
// supports MemAddressReserve, MemCreate, MemMap and the rest.
const AttrVirtualMemoryManagementSupported DeviceAttribute = 102

// memLocation is CUmemLocation.
type memLocation struct {
	Type int32 // CUmemLocationType
	ID   int32 // the device ordinal for a device location
}

// MemAllocationProp is CUmemAllocationProp (CUDA 12 and 13): what
// MemCreate allocates. Only pinned device memory is used here
// (DeviceAllocationProp).
type MemAllocationProp struct {
	Type                 int32 // CUmemAllocationType
	RequestedHandleTypes int32 // CUmemAllocationHandleType; 0: not exported
	Location             memLocation
	Win32HandleMetaData  uintptr
	AllocFlags           [8]byte // compressionType, gpuDirectRDMACapable, usage (uint16), reserved[4]
}

// MemAccessDesc is CUmemAccessDesc: the access one location gets to a
// mapped range.
type MemAccessDesc struct {
	Location memLocation
	Flags    int32 // CUmemAccess_flags
}

// DeviceAllocationProp returns the properties of pinned memory on device d,
// neither exported nor compressed.
func DeviceAllocationProp(d Device) MemAllocationProp {
	return MemAllocationProp{Type: memAllocationTypePinned, Location: memLocation{Type: memLocationTypeDevice, ID: int32(d)}}
}

// MemGetAllocationGranularity returns the granularity of prop's allocations
// (the minimum one: sizes, offsets and reserved addresses of the VMM calls
// must be multiples of it; 2 MiB on the H200).
func MemGetAllocationGranularity(prop *MemAllocationProp) (int64, error) {
	var g uint64
	err := drv(pMemGetAllocationGranularity, uintptr(unsafe.Pointer(&g)), uintptr(unsafe.Pointer(prop)), 0)
	return int64(g), err
}

// MemAddressReserve reserves size bytes of device addresses (no memory),
// aligned to align (0: the granularity).
func MemAddressReserve(size, align int64) (DevicePtr, error) {
	var p uint64
	err := drv(pMemAddressReserve, uintptr(unsafe.Pointer(&p)), uintptr(size), uintptr(align), 0, 0)
	return DevicePtr(p), err
}

// MemAddressFree frees a range from MemAddressReserve, which must be
// unmapped.
func MemAddressFree(p DevicePtr, size int64) error {
	return drv(pMemAddressFree, uintptr(p), uintptr(size))
}

// MemCreate allocates size bytes of physical memory with prop.
func MemCreate(size int64, prop *MemAllocationProp) (MemHandle, error) {
	var h uint64
	err := drv(pMemCreate, uintptr(unsafe.Pointer(&h)), uintptr(size), uintptr(unsafe.Pointer(prop)), 0)
	return MemHandle(h), err
}

// MemRelease releases h; its memory is freed once it is no longer mapped.
func MemRelease(h MemHandle) error { return drv(pMemRelease, uintptr(h)) }

// MemMap maps the whole of h (size bytes) at p, a reserved address.
func MemMap(p DevicePtr, size int64, h MemHandle) error {
	return drv(pMemMap, uintptr(p), uintptr(size), 0, uintptr(h), 0)
}

// MemUnmap unmaps size bytes at p: exactly one earlier MemMap.
func MemUnmap(p DevicePtr, size int64) error { return drv(pMemUnmap, uintptr(p), uintptr(size)) }

// MemSetAccess gives device d read and write access to the size mapped
// bytes at p (a mapping starts with none).
func MemSetAccess(p DevicePtr, size int64, d Device) error {
	desc := MemAccessDesc{Location: memLocation{Type: memLocationTypeDevice, ID: int32(d)}, Flags: memAccessReadWrite}
	return drv(pMemSetAccess, uintptr(p), uintptr(size), uintptr(unsafe.Pointer(&desc)), 1)
}
