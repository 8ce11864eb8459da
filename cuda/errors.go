package cuda

import (
	"fmt"
	"unsafe"
)

// Error is a failed call into one of the CUDA libraries.
type Error struct {
	Call string // C function, e.g. cuMemAlloc_v2
	Lib  string // cuda, nvrtc, cublasLt, nccl
	Code int    // the library's status code
	Name string // status name, e.g. CUDA_ERROR_OUT_OF_MEMORY
	Desc string // status text, e.g. "out of memory"
}

func (e *Error) Error() string {
	switch {
	case e.Desc != "" && e.Desc != e.Name:
		return fmt.Sprintf("%s: %s (%s)", e.Call, e.Name, e.Desc)
	default:
		return fmt.Sprintf("%s: %s", e.Call, e.Name)
	}
}

// Is reports whether target is a sentinel *Error (no Call) of the same
// library and code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Call == "" && t.Lib == e.Lib && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrOutOfMemory    = &Error{Lib: "cuda", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	ErrNotInitialized = &Error{Lib: "cuda", Code: 3, Name: "CUDA_ERROR_NOT_INITIALIZED"}
	ErrNoDevice       = &Error{Lib: "cuda", Code: 100, Name: "CUDA_ERROR_NO_DEVICE"}
	ErrInvalidDevice  = &Error{Lib: "cuda", Code: 101, Name: "CUDA_ERROR_INVALID_DEVICE"}
	ErrInvalidImage   = &Error{Lib: "cuda", Code: 200, Name: "CUDA_ERROR_INVALID_IMAGE"}
	ErrInvalidContext = &Error{Lib: "cuda", Code: 201, Name: "CUDA_ERROR_INVALID_CONTEXT"}
	ErrNotFound       = &Error{Lib: "cuda", Code: 500, Name: "CUDA_ERROR_NOT_FOUND"}
	ErrNotReady       = &Error{Lib: "cuda", Code: 600, Name: "CUDA_ERROR_NOT_READY"}
	ErrCaptureIllegal = &Error{Lib: "cuda", Code: 900, Name: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"}
	ErrNVRTCCompile   = &Error{Lib: "nvrtc", Code: 6, Name: "NVRTC_ERROR_COMPILATION"}
	ErrCublasNotSupp  = &Error{Lib: "cublasLt", Code: 15, Name: "CUBLAS_STATUS_NOT_SUPPORTED"}
)

// driverError turns a CUresult into an *Error naming call, or nil.
func driverError(call string, r uintptr) error {
	code := int32(r)
	if code == 0 {
		return nil
	}
	e := &Error{Call: call, Lib: "cuda", Code: int(code)}
	var name, desc unsafe.Pointer
	if rr, err := pGetErrorName.invoke(uintptr(code), uintptr(unsafe.Pointer(&name))); err == nil && int32(rr) == 0 {
		e.Name = cString(uintptr(name))
	}
	if rr, err := pGetErrorString.invoke(uintptr(code), uintptr(unsafe.Pointer(&desc))); err == nil && int32(rr) == 0 {
		e.Desc = cString(uintptr(desc))
	}
	if e.Name == "" {
		e.Name = fmt.Sprintf("CUresult %d", code)
	}
	return e
}

// drv calls a driver function and converts its CUresult.
//
//go:uintptrescapes
func drv(p *proc, args ...uintptr) error {
	r, err := p.invoke(args...)
	if err != nil {
		return err
	}
	return driverError(p.name, r)
}
