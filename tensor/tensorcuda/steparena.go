package tensorcuda

import (
	"fmt"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/tensor"
)

// stepArena hands out the memory of one step by bump allocation over large
// chunks from the device allocator, and reset takes all of it back at once.
// A block freed during the step (free) goes to a free list of its size and
// is handed out again, last freed first, to the next allocation of exactly
// that size before anything is bumped. The chunks are kept and filled again
// in the same order, so a step that makes the same allocations and frees as
// the last one gets the same addresses (what a captured CUDA graph needs)
// and makes no allocator call.
//
// A step that needed more than one chunk is followed, at reset, by one
// chunk of its high-water mark (consolidate): from then on every step of
// that size runs in one chunk, wasting no chunk's tail.
//
// With growable memory (vm: a range of addresses backed in place, the
// driver's virtual memory management) the arena has one chunk from the
// first step on, the range, and backs more of it in steps of chunk bytes
// as the bump pointer passes its backed end: no tails are wasted, no
// address moves, and what is reserved is the high-water mark rounded up to
// chunk. The free list, marks, reset and accounting are the same over it.
type stepArena struct {
	mem    memory
	vm     growable // nil: chunks from mem
	chunk  int64    // bytes of the first chunk; the granularity of a consolidated one, or of growth
	chunks []gpu.Buffer
	cur    int   // chunk being filled
	off    int64 // next free byte in it
	bumped int64 // bytes handed out by bumping since the last reset (after alignment)
	high   int64 // most bytes bumped at once since the last reset
	free   map[int64][]freeBlock
	freed  int64 // bytes on the free list
	peak   int64 // most bytes in use (bumped and not freed) at once, over all steps
	most   int64 // most bytes ever reserved from the device
	use    user  // told the bytes in use whenever they change (nil: nobody)
}

// user is told how many bytes of the arena are in use (gpu.Pool, whose
// allocator keeps the device's in-use peak).
type user interface{ SetInUse(n int64) }

// report tells a.use the bytes in use now.
func (a *stepArena) report() {
	if a.use != nil {
		a.use.SetInUse(a.inUse())
	}
}

// freeBlock is a freed block: chunk index and offset.
type freeBlock struct {
	chunk int
	off   int64
}

// arenaAlign is the alignment of every allocation: enough for 16-byte vector
// loads, cuBLASLt's preferred operand alignment and TMA descriptors.
const arenaAlign = 256

// defaultChunk is the first chunk's size, and the step in which growable
// memory is backed: 32 granules of the H200's 2 MiB, so that a 40 GiB step
// makes 640 mappings once (three driver calls each: create, map, set
// access; 2 MiB steps would make 20,480) while the reserve passes the
// high-water mark by less than 64 MiB (0.2% of 40 GiB).
const defaultChunk = 64 << 20

// growable is step memory that is one range of addresses backed by device
// memory in place (gpu.Range on a device).
type growable interface {
	// grow backs at least the range's first n bytes (rounded up to its
	// granularity) and returns the range's start and the bytes backed.
	grow(n int64) (gpu.Buffer, error)
	// release frees the range and its memory; a later grow starts afresh.
	release()
}

// maxGrowth bounds a new chunk's size (unless one allocation needs more):
// a chunk as large as all before it would leave up to half of the arena
// unused in a step that needs just over a power of two.
const maxGrowth = 2 << 30

// aligned returns the bytes an allocation of n bytes takes.
func aligned(n int64) int64 { return (max(n, 1) + arenaAlign - 1) / arenaAlign * arenaAlign }

// alloc returns n bytes (at least arenaAlign, aligned to it): a freed block
// of that size when there is one, the most recently freed, else the next
// bytes of the current chunk.
func (a *stepArena) alloc(n int64) (cuda.DevicePtr, error) {
	n = aligned(n)
	if list := a.free[n]; len(list) > 0 {
		f := list[len(list)-1]
		a.free[n] = list[:len(list)-1]
		a.freed -= n
		a.peak = max(a.peak, a.inUse())
		a.report()
		return a.chunks[f.chunk].Ptr + cuda.DevicePtr(f.off), nil
	}
	if a.vm != nil {
		return a.bumpInPlace(n)
	}
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
	total := a.reserved()
	size := max(a.chunk, n, min(total, maxGrowth))
	b, err := a.mem.alloc(size)
	if err != nil && size > max(a.chunk, n) {
		// Growing overshoots what is left on the device: take only what
		// this allocation needs.
		size = max(a.chunk, n)
		b, err = a.mem.alloc(size)
	}
	if err != nil {
		return 0, fmt.Errorf("tensorcuda: step arena chunk of %d bytes (%d in %d chunks already): %w", size, total, len(a.chunks), err)
	}
	a.chunks = append(a.chunks, b)
	a.most = max(a.most, total+size)
	a.cur, a.off = len(a.chunks)-1, n
	a.took(n)
	return b.Ptr, nil
}

// bumpInPlace hands out the next n bytes of the growable range, backing it
// first up to their end rounded up to chunk when they pass its backed end
// (or only up to their end when that much cannot be had).
func (a *stepArena) bumpInPlace(n int64) (cuda.DevicePtr, error) {
	end := a.off + n
	if len(a.chunks) == 0 || end > a.chunks[0].Size {
		size := (end + a.chunk - 1) / a.chunk * a.chunk
		r, err := a.vm.grow(size)
		if err != nil && size > end {
			r, err = a.vm.grow(end)
		}
		if err != nil {
			return 0, fmt.Errorf("tensorcuda: step arena: backing %d bytes, or %d at least (%d more at offset %d; %d backed): %w", size, end, n, a.off, a.reserved(), err)
		}
		a.chunks = append(a.chunks[:0], r)
		a.most = max(a.most, r.Size)
	}
	p := a.chunks[0].Ptr + cuda.DevicePtr(a.off)
	a.off = end
	a.took(n)
	return p, nil
}

func (a *stepArena) took(n int64) {
	a.bumped += n
	a.high = max(a.high, a.bumped)
	a.peak = max(a.peak, a.inUse())
	a.report()
}

// inUse returns the bytes handed out and not freed.
func (a *stepArena) inUse() int64 { return a.bumped - a.freed }

// reserved returns the bytes the chunks (or the range) hold from the device.
func (a *stepArena) reserved() int64 {
	var total int64
	for _, c := range a.chunks {
		total += c.Size
	}
	return total
}

// release gives back the block of n bytes at p, which alloc returned in
// this step: the next allocation of its size takes it. A block that is not
// of this step's memory or is already free panics.
func (a *stepArena) release(p cuda.DevicePtr, n int64) {
	n = aligned(n)
	f := freeBlock{chunk: -1}
	for i, c := range a.chunks {
		if p >= c.Ptr && p < c.Ptr+cuda.DevicePtr(c.Size) {
			f = freeBlock{chunk: i, off: int64(p - c.Ptr)}
			break
		}
	}
	if f.chunk < 0 || f.chunk > a.cur || f.chunk == a.cur && f.off+n > a.off {
		panic(fmt.Sprintf("tensorcuda: FreeStep of %d bytes at %#x, which the step arena has not handed out in this step", n, uint64(p)))
	}
	for _, g := range a.free[n] {
		if g == f {
			panic(fmt.Sprintf("tensorcuda: FreeStep of %d bytes at %#x, which is already free (freed twice?)", n, uint64(p)))
		}
	}
	if a.free == nil {
		a.free = map[int64][]freeBlock{}
	}
	a.free[n] = append(a.free[n], f)
	a.freed += n
	a.report()
}

// mark returns the arena's position.
func (a *stepArena) mark() tensor.StepMark { return tensor.StepMark{int64(a.cur), a.off, a.bumped} }

// rewind frees everything bumped since m: the position goes back to m and
// the free list forgets the blocks past it. A block from before m that was
// freed and handed out again since m stays in use until reset.
func (a *stepArena) rewind(m tensor.StepMark) {
	cur, off, bumped := int(m[0]), m[1], m[2]
	if cur > a.cur || cur == a.cur && off > a.off || bumped > a.bumped {
		panic(fmt.Sprintf("tensorcuda: ReleaseStep to a mark (%d, %d) past the arena's position (%d, %d): marks of an earlier step or released twice", cur, off, a.cur, a.off))
	}
	for n, list := range a.free {
		kept := list[:0]
		for _, f := range list {
			if f.chunk < cur || f.chunk == cur && f.off < off {
				kept = append(kept, f)
			} else {
				a.freed -= n
			}
		}
		a.free[n] = kept
	}
	a.cur, a.off, a.bumped = cur, off, bumped
	a.report()
}

// reset makes every chunk free again (the memory stays allocated), after
// replacing the chunks by one when the step needed several.
func (a *stepArena) reset() {
	high := a.high
	a.cur, a.off, a.bumped, a.high, a.freed = 0, 0, 0, 0, 0
	clear(a.free)
	a.report() // before chunks go: nothing is in use
	if len(a.chunks) > 1 {
		a.consolidate(high)
	}
}

// consolidate replaces the chunks by one of the step's high-water mark
// high rounded up to the first chunk's size, freeing the old ones (and the
// device allocator's cache) first so that both are never held at once.
// Should the new chunk not be had, the arena starts the next step without
// chunks and grows again, as in its first step.
func (a *stepArena) consolidate(high int64) {
	size := max(a.chunk, (high+a.chunk-1)/a.chunk*a.chunk)
	for _, c := range a.chunks {
		a.mem.free(c)
	}
	a.chunks = a.chunks[:0]
	must("step arena: release the allocator's cache", a.mem.trim())
	if b, err := a.mem.alloc(size); err == nil {
		a.chunks = append(a.chunks, b)
		a.most = max(a.most, size)
	}
}

// releaseAll returns the chunks to the device allocator, or frees the
// growable range.
func (a *stepArena) releaseAll() {
	a.bumped, a.freed = 0, 0
	a.report() // nothing is in use once the memory goes
	if a.vm != nil {
		a.vm.release()
	} else {
		for _, c := range a.chunks {
			a.mem.free(c)
		}
	}
	a.chunks = nil
	a.reset()
}
