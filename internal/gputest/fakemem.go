package gputest

import (
	"fmt"

	"dflash/cuda"
	"dflash/gpu"
)

// FakeMem is device memory in host slices at made-up, page-aligned
// addresses, for the CPU tests of code that allocates and addresses device
// buffers (a backend's memory, a rank's gradients).
type FakeMem struct {
	Limit  int64 // bytes it holds at most (0: no limit)
	Allocs int   // allocations made so far
	next   cuda.DevicePtr
	blocks map[cuda.DevicePtr][]byte
}

// NewFakeMem returns an empty FakeMem without a limit.
func NewFakeMem() *FakeMem { return &FakeMem{next: 0x100000, blocks: map[cuda.DevicePtr][]byte{}} }

// Alloc returns n zero bytes, or an error past Limit.
func (m *FakeMem) Alloc(n int64) (gpu.Buffer, error) {
	if m.Limit > 0 && m.Used()+n > m.Limit {
		return gpu.Buffer{}, fmt.Errorf("fakeMem: out of memory: %d bytes, %d of %d used", n, m.Used(), m.Limit)
	}
	p := m.next
	m.next += cuda.DevicePtr((n + 4095) / 4096 * 4096)
	m.blocks[p] = make([]byte, n)
	m.Allocs++
	return gpu.Buffer{Ptr: p, Size: n}, nil
}

// Free gives back b, an allocation of Alloc (or an empty buffer); it panics
// on anything else.
func (m *FakeMem) Free(b gpu.Buffer) {
	if b.Size > 0 && m.blocks[b.Ptr] == nil {
		panic(fmt.Sprintf("fakeMem: free of %#x, not allocated", uint64(b.Ptr)))
	}
	delete(m.blocks, b.Ptr)
}

// Bytes returns the host bytes behind b, which must lie in one allocation.
func (m *FakeMem) Bytes(b gpu.Buffer) []byte {
	for p, blk := range m.blocks {
		if b.Ptr >= p && b.Ptr+cuda.DevicePtr(b.Size) <= p+cuda.DevicePtr(len(blk)) {
			off := int(b.Ptr - p)
			return blk[off : off+int(b.Size)]
		}
	}
	panic(fmt.Sprintf("fakeMem: %d bytes at %#x are not allocated", b.Size, uint64(b.Ptr)))
}

// Used returns the bytes allocated and not freed.
func (m *FakeMem) Used() int64 {
	var n int64
	for _, b := range m.blocks {
		n += int64(len(b))
	}
	return n
}

// Live returns the number of allocations not freed.
func (m *FakeMem) Live() int { return len(m.blocks) }

// Reserve returns the start of n bytes of addresses that no allocation
// will take; Resize backs them.
func (m *FakeMem) Reserve(n int64) cuda.DevicePtr {
	p := m.next
	m.next += cuda.DevicePtr(n)
	return p
}

// Resize makes the allocation at p (made if there is none: an address of
// Reserve) n bytes, keeping its bytes, and returns them.
func (m *FakeMem) Resize(p cuda.DevicePtr, n int64) []byte {
	b := make([]byte, n)
	copy(b, m.blocks[p])
	m.blocks[p] = b
	return b
}

// Size returns the bytes of the allocation at p (0 if there is none).
func (m *FakeMem) Size(p cuda.DevicePtr) int64 { return int64(len(m.blocks[p])) }
