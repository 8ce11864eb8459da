package gpu

import "fmt"

// Pool is device memory that a sub-allocator (the step arena) holds and
// hands out in pieces: buffers of the device's allocator and the mapped
// bytes of Ranges reserved through it. Its bytes count as held from the
// device (AllocStats.PeakBytes) from the moment they are allocated or
// mapped, but as in use (PeakInUseBytes) only as far as SetInUse says,
// so that the in-use peak counts what the sub-allocator has handed out at
// that moment and not the slack it keeps. Like the Device, it belongs to
// the worker thread.
type Pool struct {
	d     *Device
	held  int64 // bytes of its buffers (block bytes) and ranges' mappings
	inUse int64 // bytes of them handed out (SetInUse)
}

// NewPool returns an empty pool of d's memory.
func (d *Device) NewPool() *Pool { return &Pool{d: d} }

// Alloc is Device.Alloc for a buffer that the pool holds.
func (p *Pool) Alloc(n int64) (Buffer, error) {
	if err := p.d.check("Pool.Alloc"); err != nil {
		return Buffer{}, err
	}
	return p.d.alloc.alloc(n, p)
}

// Free is Device.Free for a buffer of the pool's Alloc.
func (p *Pool) Free(b Buffer) { p.d.alloc.free(b, p) }

// ReserveRange is Device.ReserveRange for a range whose mapped bytes the
// pool holds.
func (p *Pool) ReserveRange(size int64) (*Range, error) {
	r, err := p.d.ReserveRange(size)
	if err == nil {
		r.pool = p
	}
	return r, err
}

// SetInUse says that n of the pool's bytes are handed out now.
func (p *Pool) SetInUse(n int64) { p.d.alloc.setInUse(p, n) }

// Held returns the bytes the pool holds from the device.
func (p *Pool) Held() int64 {
	p.d.alloc.mu.Lock()
	defer p.d.alloc.mu.Unlock()
	return p.held
}

// pooled counts n more (or, negative, fewer) bytes as held by pool, if not
// nil.
func (a *Allocator) pooled(pool *Pool, n int64) {
	if pool != nil {
		pool.held += n
		a.st.PoolFreeBytes += n
	}
}

// setInUse records that n of pool's bytes are handed out.
func (a *Allocator) setInUse(pool *Pool, n int64) {
	if n < 0 {
		panic(fmt.Sprintf("gpu: Pool.SetInUse(%d)", n))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.PoolFreeBytes -= n - pool.inUse
	pool.inUse = n
	a.usedLocked()
}
