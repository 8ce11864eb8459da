package cuda

import (
	"bytes"
	"sync"
	"unsafe"
)

// Handles of the driver API. Zero is "none" (Stream 0 is the legacy default
// stream).
type (
	Device    int32   // CUdevice
	Context   uintptr // CUcontext
	Stream    uintptr // CUstream
	Event     uintptr // CUevent
	Module    uintptr // CUmodule
	Function  uintptr // CUfunction
	DevicePtr uint64  // CUdeviceptr
	Graph     uintptr // CUgraph
	GraphExec uintptr // CUgraphExec
)

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int32

// Device attributes used by dflash.
const (
	AttrMaxThreadsPerBlock           DeviceAttribute = 1
	AttrMaxSharedMemoryPerBlock      DeviceAttribute = 8
	AttrWarpSize                     DeviceAttribute = 10
	AttrClockRate                    DeviceAttribute = 13 // kHz
	AttrMultiprocessorCount          DeviceAttribute = 16
	AttrPCIBusID                     DeviceAttribute = 33
	AttrMemoryClockRate              DeviceAttribute = 36 // kHz
	AttrGlobalMemoryBusWidth         DeviceAttribute = 37 // bits
	AttrL2CacheSize                  DeviceAttribute = 38 // bytes
	AttrComputeCapabilityMajor       DeviceAttribute = 75
	AttrComputeCapabilityMinor       DeviceAttribute = 76
	AttrMaxSharedMemoryPerSM         DeviceAttribute = 81
	AttrMaxSharedMemoryPerBlockOptin DeviceAttribute = 97
)

var (
	initOnce sync.Once
	initErr  error
)

// Init loads the driver library and calls cuInit once per process; later
// calls return the first result.
func Init() error {
	initOnce.Do(func() { initErr = drv(pInit, 0) })
	return initErr
}

// DriverVersion returns the driver's CUDA version as 1000*major + 10*minor.
func DriverVersion() (int, error) {
	var v int32
	err := drv(pDriverGetVersion, uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

// DeviceCount returns the number of CUDA devices (0 with an error when the
// driver is missing).
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n int32
	err := drv(pDeviceGetCount, uintptr(unsafe.Pointer(&n)))
	return int(n), err
}

// DeviceGet returns the device with the given ordinal.
func DeviceGet(ordinal int) (Device, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var d int32
	err := drv(pDeviceGet, uintptr(unsafe.Pointer(&d)), uintptr(ordinal))
	return Device(d), err
}

// Name returns the device's marketing name, e.g. "NVIDIA H200".
func (d Device) Name() (string, error) {
	buf := make([]byte, 256)
	if err := drv(pDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(d)); err != nil {
		return "", err
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), nil
}

// Attribute returns one device attribute.
func (d Device) Attribute(a DeviceAttribute) (int, error) {
	var v int32
	err := drv(pDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(d))
	return int(v), err
}

// TotalMem returns the device's memory in bytes.
func (d Device) TotalMem() (int64, error) {
	var n uint64
	err := drv(pDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(d))
	return int64(n), err
}

// ComputeCapability returns the device's major and minor compute capability.
func (d Device) ComputeCapability() (major, minor int, err error) {
	if major, err = d.Attribute(AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	minor, err = d.Attribute(AttrComputeCapabilityMinor)
	return major, minor, err
}

// PrimaryCtxRetain retains the device's primary context (creating it if
// needed). Pair with PrimaryCtxRelease.
func PrimaryCtxRetain(d Device) (Context, error) {
	var c uintptr
	err := drv(pPrimaryCtxRetain, uintptr(unsafe.Pointer(&c)), uintptr(d))
	return Context(c), err
}

// PrimaryCtxRelease releases one retain of the device's primary context.
func PrimaryCtxRelease(d Device) error { return drv(pPrimaryCtxRelease, uintptr(d)) }

// CtxSetCurrent binds c to the calling OS thread.
func CtxSetCurrent(c Context) error { return drv(pCtxSetCurrent, uintptr(c)) }

// CtxSynchronize waits for all work in the current context.
func CtxSynchronize() error { return drv(pCtxSynchronize) }

// MemGetInfo returns the free and total memory of the current context's device.
func MemGetInfo() (free, total int64, err error) {
	var f, t uint64
	err = drv(pMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t)))
	return int64(f), int64(t), err
}
