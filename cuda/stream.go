package cuda

import (
	"unsafe"
)

// Stream and event creation flags.
const (
	StreamDefault      = 0x0
	StreamNonBlocking  = 0x1 // no implicit synchronisation with the legacy default stream
	EventDefault       = 0x0
	EventBlockingSync  = 0x1
	EventDisableTiming = 0x2
)

// StreamCreate creates a stream in the current context.
func StreamCreate(flags uint32) (Stream, error) {
	var s uintptr
	err := drv(pStreamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags))
	return Stream(s), err
}

// StreamDestroy destroys s once its queued work is done.
func StreamDestroy(s Stream) error { return drv(pStreamDestroy, uintptr(s)) }

// StreamSynchronize waits for all work queued on s.
func StreamSynchronize(s Stream) error { return drv(pStreamSynchronize, uintptr(s)) }

// StreamWaitEvent makes future work on s wait for e.
func StreamWaitEvent(s Stream, e Event) error {
	return drv(pStreamWaitEvent, uintptr(s), uintptr(e), 0)
}

// EventCreate creates an event in the current context.
func EventCreate(flags uint32) (Event, error) {
	var e uintptr
	err := drv(pEventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags))
	return Event(e), err
}

// EventDestroy destroys e.
func EventDestroy(e Event) error { return drv(pEventDestroy, uintptr(e)) }

// EventRecord records e on s.
func EventRecord(e Event, s Stream) error { return drv(pEventRecord, uintptr(e), uintptr(s)) }

// EventSynchronize waits until e has been reached.
func EventSynchronize(e Event) error { return drv(pEventSynchronize, uintptr(e)) }

// EventQuery reports whether e has been reached, without waiting
// (cuEventQuery's CUDA_ERROR_NOT_READY is false, not an error).
func EventQuery(e Event) (bool, error) {
	r, err := pEventQuery.invoke(uintptr(e))
	if err != nil {
		return false, err
	}
	if int32(r) == int32(ErrNotReady.Code) {
		return false, nil
	}
	return int32(r) == 0, driverError(pEventQuery.name, r)
}

// EventElapsedTime returns the milliseconds between two recorded events.
func EventElapsedTime(start, end Event) (float32, error) {
	var ms float32
	err := drv(pEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end))
	return ms, err
}
