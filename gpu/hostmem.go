package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"dflash/cuda"
)

// hostChunk is how much of AllocHost's memory one driver call page-locks.
// The driver holds a lock of the device's while it pins memory, so one
// call for many GB (7 s for 12.6 GB) stalls the worker's launches and
// copies as long; pieces of this size stall them a fraction of a second
// at most.
const hostChunk = 256 << 20

// pinnedHost is what the device holds of AllocHost's allocations: each
// one's memory, page-locked in pieces of hostChunk from its start.
type pinnedHost struct {
	mu    sync.Mutex
	alloc map[*byte][]byte // by the first byte
}

// AllocHost returns n bytes of page-locked (pinned) host memory: a copy
// between it and the device is DMA at the link's full speed, where
// pageable memory goes through the driver's staging buffers. The memory is
// the process's own (mapped and its pages touched by all cores, outside
// the driver), page-locked in pieces of hostChunk bytes, each on an OS
// thread with the device's context current when called off the worker, so
// that many GB (seconds) go on beside the worker's work without holding it
// up for long. It may be called from any goroutine. Give it back with
// FreeHost.
func (d *Device) AllocHost(n int64) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	b, err := mapHost(n)
	if err != nil {
		return nil, fmt.Errorf("gpu %d: %d bytes of host memory: %w", d.info.Ordinal, n, err)
	}
	touchPages(b)
	for off := int64(0); off < n; off += hostChunk {
		piece := b[off:min(off+hostChunk, n)]
		if err := d.hostCall(func() error { return cuda.MemHostRegister(piece) }); err != nil {
			err = errors.Join(err, d.unregister(b[:off]), unmapHost(b))
			return nil, fmt.Errorf("gpu %d: page-lock %d bytes of host memory: %w", d.info.Ordinal, n, err)
		}
	}
	d.pinned.mu.Lock()
	defer d.pinned.mu.Unlock()
	if d.pinned.alloc == nil {
		d.pinned.alloc = map[*byte][]byte{}
	}
	d.pinned.alloc[&b[0]] = b
	return b, nil
}

// FreeHost gives back memory from AllocHost, from any goroutine; other
// memory is a programmer error and panics.
func (d *Device) FreeHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	d.pinned.mu.Lock()
	whole, ok := d.pinned.alloc[&b[0]]
	delete(d.pinned.alloc, &b[0])
	d.pinned.mu.Unlock()
	if !ok {
		panic("gpu: FreeHost of memory that AllocHost did not return (or freed already)")
	}
	return errors.Join(d.unregister(whole), unmapHost(whole))
}

// unregister undoes AllocHost's page-locking of b, a prefix of its memory
// (whole pieces).
func (d *Device) unregister(b []byte) error {
	var errs []error
	for off := 0; off < len(b); off += hostChunk {
		piece := b[off:min(off+hostChunk, len(b))]
		errs = append(errs, d.hostCall(func() error { return cuda.MemHostUnregister(piece) }))
	}
	return errors.Join(errs...)
}

// hostPieces calls copy for each part of the n bytes at p that lies in
// one piece of AllocHost's page-locking (one part for memory that is not
// AllocHost's), in order, with the part's offset from p and length: a DMA
// copy stays inside one registration.
func (d *Device) hostPieces(p unsafe.Pointer, n int64, copy func(off, n int64) error) error {
	start := uintptr(p)
	base := uintptr(0)
	d.pinned.mu.Lock()
	for first, b := range d.pinned.alloc {
		if lo := uintptr(unsafe.Pointer(first)); start >= lo && start < lo+uintptr(len(b)) {
			base = lo
			break
		}
	}
	d.pinned.mu.Unlock()
	if base == 0 {
		return copy(0, n)
	}
	for off := int64(0); off < n; {
		end := min(n, int64(hostChunk-(start+uintptr(off)-base)%hostChunk)+off)
		if err := copy(off, end-off); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// touchPages writes a zero into every page of b, the pages split among the
// cores, so that the kernel backs them before the driver pins them.
func touchPages(b []byte) {
	const page = 4096
	parts := runtime.GOMAXPROCS(0)
	per := (len(b)/page + parts - 1) / parts * page
	var wg sync.WaitGroup
	for lo := 0; lo < len(b); lo += per {
		wg.Add(1)
		go func(part []byte) {
			defer wg.Done()
			for i := 0; i < len(part); i += page {
				part[i] = 0
			}
		}(b[lo:min(lo+per, len(b))])
	}
	wg.Wait()
}
