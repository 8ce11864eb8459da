package gpu

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"dflash/cuda"
	"dflash/internal/meminfo"
)

// Buffer is device memory from a Device's allocator.
type Buffer struct {
	Ptr  cuda.DevicePtr
	Size int64 // bytes requested; the block behind it may be larger
}

// memory is what the allocator needs from the device (faked in CPU tests).
type memory interface {
	alloc(n int64) (cuda.DevicePtr, error)
	free(p cuda.DevicePtr) error
	info() (free, total int64, err error)
}

type cudaMemory struct{}

func (cudaMemory) alloc(n int64) (cuda.DevicePtr, error) { return cuda.MemAlloc(n) }
func (cudaMemory) free(p cuda.DevicePtr) error           { return cuda.MemFree(p) }
func (cudaMemory) info() (free, total int64, err error)  { return cuda.MemGetInfo() }

// AllocStats counts an allocator's work. Bytes are block (size-class) bytes.
type AllocStats struct {
	Allocs       int64 // Alloc calls that succeeded
	Frees        int64 // Free calls
	Reuses       int64 // Allocs served from the cache
	DeviceAllocs int64 // cuMemAlloc calls
	DeviceFrees  int64 // cuMemFree calls
	Maps         int64 // Range.Grow's allocations mapped into a range
	// DriverSeconds is the wall time of the driver's allocation calls:
	// cuMemAlloc, cuMemFree and a Range's create, map and access calls.
	DriverSeconds float64
	OOMRetries    int64 // allocations retried after releasing the cache
	LiveBuffers   int64 // buffers allocated and not freed
	InUseBytes    int64 // bytes of live buffers
	CachedBytes   int64 // bytes held for reuse
	MappedBytes   int64 // bytes mapped into the device's Ranges (outside the cache)
	PeakBytes     int64 // most bytes ever held from the device (in use + cached + mapped)

	// PoolFreeBytes are bytes that Pools hold (in InUseBytes or
	// MappedBytes) and have not handed out. Bytes in use are
	// InUseBytes + MappedBytes - PoolFreeBytes: torch's "allocated" where
	// PeakBytes is its "reserved".
	PoolFreeBytes  int64
	PeakInUseBytes int64 // most bytes in use at once
}

// Allocator is a caching device allocator. Freed blocks are kept per size
// class and handed out again, so a training step that allocates the same
// sizes as the last one makes no driver calls. Release returns the cache to
// the driver; an allocation that fails with out-of-memory releases the cache
// and tries once more before reporting an *OutOfMemoryError.
//
// Blocks are reused in the order of the calls: a block freed while kernels
// on a stream other than the one of its next user still read it must be
// freed only after synchronising (the default stream orders itself).
type Allocator struct {
	gpu int
	mem memory

	mu    sync.Mutex
	pools map[int64][]cuda.DevicePtr // class size -> free blocks
	live  map[cuda.DevicePtr]int64   // block -> class size
	st    AllocStats
}

func newAllocator(gpu int, mem memory) *Allocator {
	return &Allocator{gpu: gpu, mem: mem, pools: map[int64][]cuda.DevicePtr{}, live: map[cuda.DevicePtr]int64{}}
}

// sizeClass rounds n up to its block size: multiples of 512 B up to 1 MiB,
// then steps of 1/8 of the power of two below n (at least 2 MiB), so a block
// wastes at most 12.5% above 1 MiB.
func sizeClass(n int64) int64 {
	const small, mib = 512, 1 << 20
	if n <= mib {
		return (n + small - 1) / small * small
	}
	p := int64(1) << (63 - bits.LeadingZeros64(uint64(n)))
	step := max(p/8, 2*mib)
	return (n + step - 1) / step * step
}

// Alloc returns a buffer of at least n bytes.
func (a *Allocator) Alloc(n int64) (Buffer, error) { return a.alloc(n, nil) }

// alloc returns a buffer of at least n bytes, held by pool when it is not
// nil.
func (a *Allocator) alloc(n int64, pool *Pool) (Buffer, error) {
	if n <= 0 {
		panic(fmt.Sprintf("gpu: Alloc of %d bytes", n))
	}
	class := sizeClass(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	if free := a.pools[class]; len(free) > 0 {
		p := free[len(free)-1]
		a.pools[class] = free[:len(free)-1]
		a.st.Reuses++
		a.st.CachedBytes -= class
		return a.hand(p, n, class, pool), nil
	}
	return a.driverLocked(n, class, pool, true)
}

// driverLocked hands out a new block of class bytes from the driver for a
// request of n; with retry, an out-of-memory first gives the cache back to
// the driver and tries once more.
func (a *Allocator) driverLocked(n, class int64, pool *Pool, retry bool) (Buffer, error) {
	p, err := a.driverAllocLocked(class)
	if retry && errors.Is(err, cuda.ErrOutOfMemory) && a.st.CachedBytes > 0 {
		a.st.OOMRetries++
		if rerr := a.releaseLocked(); rerr != nil {
			return Buffer{}, rerr
		}
		p, err = a.driverAllocLocked(class)
	}
	if err != nil {
		if errors.Is(err, cuda.ErrOutOfMemory) {
			return Buffer{}, a.oomLocked(n, class, err)
		}
		return Buffer{}, fmt.Errorf("gpu %d: alloc %d bytes: %w", a.gpu, n, err)
	}
	a.st.DeviceAllocs++
	a.heldLocked(class)
	return a.hand(p, n, class, pool), nil
}

// driverAllocLocked and driverFreeLocked call the driver, timed
// (AllocStats.DriverSeconds).
func (a *Allocator) driverAllocLocked(n int64) (cuda.DevicePtr, error) {
	defer a.timedLocked(time.Now())
	return a.mem.alloc(n)
}

func (a *Allocator) driverFreeLocked(p cuda.DevicePtr) error {
	defer a.timedLocked(time.Now())
	return a.mem.free(p)
}

// timedLocked adds the time since t to the driver's.
func (a *Allocator) timedLocked(t time.Time) { a.st.DriverSeconds += time.Since(t).Seconds() }

// heldLocked updates the peak with n more bytes held from the device.
func (a *Allocator) heldLocked(n int64) {
	a.st.PeakBytes = max(a.st.PeakBytes, a.st.InUseBytes+a.st.CachedBytes+a.st.MappedBytes+n)
}

// ResetPeaks starts both peaks again from what is held and in use now, as
// torch.cuda.reset_peak_memory_stats does (the bench measures its timed
// steps so, as its PyTorch peer does).
func (a *Allocator) ResetPeaks() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.PeakBytes, a.st.PeakInUseBytes = 0, 0
	a.heldLocked(0)
	a.usedLocked()
}

// usedLocked updates the in-use peak with the bytes in use now.
func (a *Allocator) usedLocked() {
	a.st.PeakInUseBytes = max(a.st.PeakInUseBytes, a.st.InUseBytes+a.st.MappedBytes-a.st.PoolFreeBytes)
}

// oomLocked returns the *OutOfMemoryError of a request of n bytes (block
// bytes asked of the driver) that failed with err.
func (a *Allocator) oomLocked(n, block int64, err error) error {
	oom := &OutOfMemoryError{GPU: a.gpu, Requested: n, Block: block,
		InUse: a.st.InUseBytes + a.st.MappedBytes, Cached: a.st.CachedBytes, Err: err}
	oom.Free, oom.Total, oom.InfoErr = a.mem.info()
	return oom
}

// mapped runs create, which backs n bytes of a Range with device memory
// outside the cache, and counts them as mapped when it succeeds (and as
// held by pool when it is not nil). Out of memory releases the cache and
// runs create once more, as Alloc does; a second failure is an
// *OutOfMemoryError.
func (a *Allocator) mapped(n int64, pool *Pool, create func() error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	timed := func() error {
		defer a.timedLocked(time.Now())
		return create()
	}
	err := timed()
	if errors.Is(err, cuda.ErrOutOfMemory) && a.st.CachedBytes > 0 {
		a.st.OOMRetries++
		if rerr := a.releaseLocked(); rerr != nil {
			return rerr
		}
		err = timed()
	}
	if errors.Is(err, cuda.ErrOutOfMemory) {
		return a.oomLocked(n, n, err)
	}
	if err != nil {
		return err
	}
	a.heldLocked(n)
	a.st.Maps++
	a.st.MappedBytes += n
	a.pooled(pool, n)
	a.usedLocked()
	return nil
}

// unmapped counts n bytes of a Range (held by pool, when not nil) as given
// back to the device.
func (a *Allocator) unmapped(n int64, pool *Pool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.MappedBytes -= n
	a.pooled(pool, -n)
}

func (a *Allocator) hand(p cuda.DevicePtr, n, class int64, pool *Pool) Buffer {
	a.live[p] = class
	a.st.Allocs++
	a.st.LiveBuffers++
	a.st.InUseBytes += class
	a.pooled(pool, class)
	a.usedLocked()
	return Buffer{Ptr: p, Size: n}
}

// Free returns b's block to the cache. Freeing a buffer twice, or one this
// allocator did not make, panics.
func (a *Allocator) Free(b Buffer) { a.free(b, nil) }

// free returns b's block, held by pool when it is not nil, to the cache.
func (a *Allocator) free(b Buffer, pool *Pool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	class := a.takeLocked(b)
	a.pools[class] = append(a.pools[class], b.Ptr)
	a.st.CachedBytes += class
	a.pooled(pool, -class)
}

// takeLocked ends b's life as a buffer (hand's counterpart) and returns its
// block's class. Freeing a buffer twice, or one this allocator did not
// make, panics.
func (a *Allocator) takeLocked(b Buffer) int64 {
	class, ok := a.live[b.Ptr]
	if !ok {
		panic(fmt.Sprintf("gpu %d: Free of %#x, which is not a live buffer of this device (double free?)", a.gpu, b.Ptr))
	}
	delete(a.live, b.Ptr)
	a.st.Frees++
	a.st.LiveBuffers--
	a.st.InUseBytes -= class
	return class
}

// allocDirect returns a block of at least n bytes from the driver itself,
// not the cache, for short-lived scratch (GEMM tuning's) that must leave
// the cache as it was: a graph captured over cached blocks would otherwise
// find its buffers moved. Give it back with freeDirect.
func (a *Allocator) allocDirect(n int64) (Buffer, error) {
	if n <= 0 {
		panic(fmt.Sprintf("gpu: Alloc of %d bytes", n))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.driverLocked(n, sizeClass(n), nil, false)
}

// freeDirect returns a block of allocDirect to the driver.
func (a *Allocator) freeDirect(b Buffer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.takeLocked(b)
	a.st.DeviceFrees++
	return a.driverFreeLocked(b.Ptr)
}

// Release returns every cached block to the driver and reports the bytes.
func (a *Allocator) Release() (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.st.CachedBytes
	return n, a.releaseLocked()
}

func (a *Allocator) releaseLocked() error {
	var errs []error
	for class, free := range a.pools {
		for _, p := range free {
			if err := a.driverFreeLocked(p); err != nil {
				errs = append(errs, err)
				continue
			}
			a.st.DeviceFrees++
			a.st.CachedBytes -= class
		}
		delete(a.pools, class)
	}
	return errors.Join(errs...)
}

// Stats returns a snapshot of the allocator's counters.
func (a *Allocator) Stats() AllocStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

// OutOfMemoryError reports a failed allocation with the numbers needed to
// understand it.
type OutOfMemoryError struct {
	GPU         int
	Requested   int64 // bytes asked for
	Block       int64 // size-class bytes actually requested from the driver
	InUse       int64 // bytes in live buffers of this allocator and mapped into its device's Ranges
	Cached      int64 // bytes cached (0 after the retry released them)
	Free, Total int64 // the driver's view of the device after the failure
	InfoErr     error // why Free and Total are unknown, if they are
	Err         error // the driver's error
}

func (e *OutOfMemoryError) Error() string {
	memStr := func(n int64) string { return meminfo.Format(float64(n)) }
	dev := fmt.Sprintf("%s free of %s on the device", memStr(e.Free), memStr(e.Total))
	if e.InfoErr != nil {
		dev = "device free memory unknown: " + e.InfoErr.Error()
	}
	return fmt.Sprintf("gpu %d: out of memory allocating %s (block %s): %s in use by dflash, %s cached, %s: %v",
		e.GPU, memStr(e.Requested), memStr(e.Block), memStr(e.InUse), memStr(e.Cached), dev, e.Err)
}

// Unwrap returns the driver's error (errors.Is(err, cuda.ErrOutOfMemory)).
func (e *OutOfMemoryError) Unwrap() error { return e.Err }

// Alloc returns a device buffer of at least n bytes from the caching allocator.
func (d *Device) Alloc(n int64) (Buffer, error) {
	if err := d.check("Alloc"); err != nil {
		return Buffer{}, err
	}
	return d.alloc.Alloc(n)
}

// Free returns b to the caching allocator.
func (d *Device) Free(b Buffer) { d.alloc.Free(b) }

// AllocStats returns the allocator's counters.
func (d *Device) AllocStats() AllocStats { return d.alloc.Stats() }

// ResetPeakMemory starts the allocator's peaks (AllocStats) again from now.
func (d *Device) ResetPeakMemory() { d.alloc.ResetPeaks() }

// ReleaseCached returns the allocator's cached blocks to the driver.
func (d *Device) ReleaseCached() (int64, error) {
	if err := d.check("ReleaseCached"); err != nil {
		return 0, err
	}
	return d.alloc.Release()
}
