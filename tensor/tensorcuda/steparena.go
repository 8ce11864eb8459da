package tensorcuda

import (
	"fmt"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/tensor"
)

// stepArena hands out the memory of one step by bump allocation over large
// chunks from the device allocator, and reset takes all of it back at once.
// The chunks are kept and filled again in the same order, so a step that
// makes the same allocations as the last one gets the same addresses (what
// a captured CUDA graph needs) and makes no allocator call.
type stepArena struct {
	mem    memory
	chunk  int64 // bytes of the first chunk; later ones at least double the total
	chunks []gpu.Buffer
	cur    int   // chunk being filled
	off    int64 // next free byte in it
	inUse  int64 // bytes handed out since the last reset (after alignment)
	peak   int64 // most bytes handed out in one step
}

// arenaAlign is the alignment of every allocation: enough for 16-byte vector
// loads, cuBLASLt's preferred operand alignment and TMA descriptors.
const arenaAlign = 256

// defaultChunk is the first chunk's size.
const defaultChunk = 64 << 20

// alloc returns n bytes (at least arenaAlign, aligned to it).
func (a *stepArena) alloc(n int64) (cuda.DevicePtr, error) {
	n = (max(n, 1) + arenaAlign - 1) / arenaAlign * arenaAlign
	for a.cur < len(a.chunks) {
		c := a.chunks[a.cur]
		if a.off+n <= c.Size {
			p := c.Ptr + cuda.DevicePtr(a.off)
			a.off += n
			a.took(n)
			return p, nil
		}
		a.cur, a.off = a.cur+1, 0
	}
	var total int64
	for _, c := range a.chunks {
		total += c.Size
	}
	size := max(a.chunk, n, total)
	b, err := a.mem.alloc(size)
	if err != nil && size > max(a.chunk, n) {
		// Doubling overshoots what is left on the device: take only what
		// this allocation needs.
		size = max(a.chunk, n)
		b, err = a.mem.alloc(size)
	}
	if err != nil {
		return 0, fmt.Errorf("tensorcuda: step arena chunk of %d bytes (%d in %d chunks already): %w", size, total, len(a.chunks), err)
	}
	a.chunks = append(a.chunks, b)
	a.cur, a.off = len(a.chunks)-1, n
	a.took(n)
	return b.Ptr, nil
}

func (a *stepArena) took(n int64) {
	a.inUse += n
	a.peak = max(a.peak, a.inUse)
}

// mark returns the arena's position.
func (a *stepArena) mark() tensor.StepMark { return tensor.StepMark{int64(a.cur), a.off, a.inUse} }

// rewind frees everything allocated since m.
func (a *stepArena) rewind(m tensor.StepMark) {
	cur, off, inUse := int(m[0]), m[1], m[2]
	if cur > a.cur || cur == a.cur && off > a.off || inUse > a.inUse {
		panic(fmt.Sprintf("tensorcuda: ReleaseStep to a mark (%d, %d) past the arena's position (%d, %d): marks of an earlier step or released twice", cur, off, a.cur, a.off))
	}
	a.cur, a.off, a.inUse = cur, off, inUse
}

// reset makes every chunk free again (the memory stays allocated).
func (a *stepArena) reset() { a.cur, a.off, a.inUse = 0, 0, 0 }

// release returns the chunks to the device allocator.
func (a *stepArena) release() {
	for _, c := range a.chunks {
		a.mem.free(c)
	}
	a.chunks = nil
	a.reset()
}
