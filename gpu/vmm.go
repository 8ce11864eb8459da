package gpu

import (
	"errors"
	"fmt"

	"dflash/cuda"
)

// Range is device address space reserved once and backed by physical
// memory from its start up to Mapped, which Grow extends in place: an
// address in it never moves, and the device holds only the mapped bytes
// (counted in the allocator's MappedBytes and PeakBytes). It uses the
// driver's virtual memory management (VMMSupported); like the Device, it
// belongs to the worker thread.
type Range struct {
	d      *Device
	base   cuda.DevicePtr
	size   int64 // bytes reserved
	gran   int64 // the allocation granularity
	mapped int64
	maps   []mapping
	pool   *Pool // the pool that holds the mapped bytes (Pool.ReserveRange), or nil
}

// mapping is one physical allocation mapped at base+off.
type mapping struct {
	h      cuda.MemHandle
	off, n int64
}

// VMMSupported reports whether the device supports virtual memory
// management (ReserveRange).
func (d *Device) VMMSupported() (bool, error) {
	if d.fake {
		return false, nil
	}
	v, err := d.cu.Attribute(cuda.AttrVirtualMemoryManagementSupported)
	return v == 1, err
}

// ReserveRange reserves size bytes of device addresses (rounded up to the
// allocation granularity), backed by no memory until Grow.
func (d *Device) ReserveRange(size int64) (*Range, error) {
	if err := d.check("ReserveRange"); err != nil {
		return nil, err
	}
	if d.fake {
		return nil, fmt.Errorf("gpu %d: ReserveRange on a device without CUDA", d.info.Ordinal)
	}
	prop := cuda.DeviceAllocationProp(d.cu)
	gran, err := cuda.MemGetAllocationGranularity(&prop)
	if err != nil {
		return nil, fmt.Errorf("gpu %d: %w", d.info.Ordinal, err)
	}
	size = roundUp(max(size, 1), gran)
	p, err := cuda.MemAddressReserve(size, 0)
	if err != nil {
		return nil, fmt.Errorf("gpu %d: reserve %d bytes of addresses: %w", d.info.Ordinal, size, err)
	}
	r := &Range{d: d, base: p, size: size, gran: gran}
	d.ranges[r] = struct{}{}
	return r, nil
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// Base returns the range's first address.
func (r *Range) Base() cuda.DevicePtr { return r.base }

// Size returns the bytes reserved.
func (r *Range) Size() int64 { return r.size }

// Mapped returns the bytes backed by memory, from Base on.
func (r *Range) Mapped() int64 { return r.mapped }

// Granularity returns the allocation granularity: Mapped is a multiple.
func (r *Range) Granularity() int64 { return r.gran }

// Grow backs the range's first n bytes (rounded up to the granularity)
// with memory, by one new allocation mapped after the mapped ones and
// readable and writable by the device; it does nothing when they are
// backed already. Out of device memory is an *OutOfMemoryError (after the
// allocator's cache was released and the allocation tried again); the
// range is then as before.
func (r *Range) Grow(n int64) error {
	if err := r.d.check("Range.Grow"); err != nil {
		return err
	}
	if n <= r.mapped {
		return nil
	}
	n = roundUp(n, r.gran)
	if n > r.size {
		return fmt.Errorf("gpu %d: grow a range of %d reserved bytes to %d", r.d.info.Ordinal, r.size, n)
	}
	add, p := n-r.mapped, r.base+cuda.DevicePtr(r.mapped)
	var h cuda.MemHandle
	err := r.d.alloc.mapped(add, r.pool, func() error {
		prop := cuda.DeviceAllocationProp(r.d.cu)
		var err error
		if h, err = cuda.MemCreate(add, &prop); err != nil {
			return err
		}
		if err = cuda.MemMap(p, add, h); err != nil {
			return errors.Join(err, cuda.MemRelease(h))
		}
		if err = cuda.MemSetAccess(p, add, r.d.cu); err != nil {
			return errors.Join(err, cuda.MemUnmap(p, add), cuda.MemRelease(h))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("gpu %d: map %d bytes at offset %d of a range of %d: %w", r.d.info.Ordinal, add, r.mapped, r.size, err)
	}
	r.maps = append(r.maps, mapping{h: h, off: r.mapped, n: add})
	r.mapped = n
	return nil
}

// Free waits for the device's queued work, unmaps and frees the range's
// memory and frees its addresses. The range must not be used afterwards.
func (r *Range) Free() error {
	if err := r.d.check("Range.Free"); err != nil {
		return err
	}
	return r.free()
}

func (r *Range) free() error {
	if _, ok := r.d.ranges[r]; !ok {
		return nil
	}
	errs := []error{cuda.CtxSynchronize()}
	for i := len(r.maps) - 1; i >= 0; i-- {
		m := r.maps[i]
		errs = append(errs, cuda.MemUnmap(r.base+cuda.DevicePtr(m.off), m.n), cuda.MemRelease(m.h))
		r.d.alloc.unmapped(m.n, r.pool)
	}
	errs = append(errs, cuda.MemAddressFree(r.base, r.size))
	r.maps, r.mapped = nil, 0
	delete(r.d.ranges, r)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gpu %d: free a range of %d bytes: %w", r.d.info.Ordinal, r.size, err)
	}
	return nil
}
