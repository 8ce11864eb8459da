package cuda

import "unsafe"

// MemAlloc allocates n bytes of device memory in the current context.
func MemAlloc(n int64) (DevicePtr, error) {
	var p uint64
	err := drv(pMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n))
	return DevicePtr(p), err
}

// MemFree frees device memory from MemAlloc.
func MemFree(p DevicePtr) error { return drv(pMemFree, uintptr(p)) }

// MemAllocHost allocates n bytes of page-locked host memory, usable by
// asynchronous copies. Free it with MemFreeHost.
func MemAllocHost(n int64) ([]byte, error) {
	var p unsafe.Pointer
	if err := drv(pMemAllocHost, uintptr(unsafe.Pointer(&p)), uintptr(n)); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// MemFreeHost frees memory from MemAllocHost.
func MemFreeHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return drv(pMemFreeHost, uintptr(unsafe.Pointer(&b[0])))
}

// MemHostRegister page-locks host memory b for the device (as
// MemAllocHost's): copies between it and the device are DMA transfers.
// Undo it with MemHostUnregister before b is freed.
func MemHostRegister(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return drv(pMemHostRegister, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0)
}

// MemHostUnregister undoes MemHostRegister of b.
func MemHostUnregister(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return drv(pMemHostUnregister, uintptr(unsafe.Pointer(&b[0])))
}

// MemcpyHtoD copies n bytes from host memory at src to dst; it returns once
// src has been read.
func MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, n int64) error {
	return drv(pMemcpyHtoD, uintptr(dst), uintptr(src), uintptr(n))
}

// MemcpyDtoH copies n bytes from src to host memory at dst and waits for it.
func MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, n int64) error {
	return drv(pMemcpyDtoH, uintptr(dst), uintptr(src), uintptr(n))
}

// MemcpyHtoDAsync queues a copy of n bytes from host memory to dst on s.
// src must stay valid until the copy has run: use pinned memory
// (MemAllocHost) for a truly asynchronous copy.
func MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n int64, s Stream) error {
	return drv(pMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

// MemcpyDtoHAsync queues a copy of n bytes from src to host memory on s; dst
// must stay valid until the stream has reached the copy.
func MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n int64, s Stream) error {
	return drv(pMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

// MemcpyDtoDAsync queues a device-to-device copy on s.
func MemcpyDtoDAsync(dst, src DevicePtr, n int64, s Stream) error {
	return drv(pMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

// MemsetD8Async queues setting n bytes at dst to v on s.
func MemsetD8Async(dst DevicePtr, v byte, n int64, s Stream) error {
	return drv(pMemsetD8Async, uintptr(dst), uintptr(v), uintptr(n), uintptr(s))
}
