package backendtest

import (
	"fmt"
	"math"

	"dflash/dtype"
	"dflash/flex"
	"dflash/tensor"
)

// StepCPU is the float32 CPU backend with step memory as the CUDA backend
// has it (ResetStep, MarkStep, ReleaseStep and a FreeStep that gives
// memory back), keeping account of it:
// every activation, statistic, upload, attention output and gradient of an
// activation (Like of its storage) is step memory at a position that
// bumps, a freed allocation is handed out again, last freed first, to the
// next allocation of its size, and ReleaseStep and ResetStep take back
// what they scope. What it frees it fills with NaN first, so that a result
// that still read freed memory would show. Parameters are host memory
// outside it, as on a device.
type StepCPU struct {
	*tensor.CPU[float32]

	blocks []stepBlock         // the bumped allocations, in order
	free   map[int][]stepBlock // freed blocks by length, last freed last
	off    int                 // elements bumped: the next block's position
	freed  int                 // elements on the free list

	// Allocs and Frees count allocations and FreeStep calls, Zeroed the
	// allocations handed out zeroed (Alloc, AllocStat, Like: a memset on a
	// device); Peak is the most elements in use (allocated, not freed) at
	// once.
	Allocs, Frees, Zeroed, Peak int
}

type stepBlock struct {
	off  int
	h    tensor.Host[float32]
	live bool
}

// NewStepCPU returns the backend over the float32 CPU backend of workers goroutines.
func NewStepCPU(workers int) *StepCPU { return &StepCPU{CPU: tensor.NewCPU[float32](workers)} }

var _ tensor.Backend[float32] = (*StepCPU)(nil)

// InUse returns the elements allocated and not freed.
func (c *StepCPU) InUse() int { return c.off - c.freed }

// Alloc returns n zero elements of step memory.
func (c *StepCPU) Alloc(n int) tensor.Storage[float32] {
	c.Zeroed++
	return c.alloc(n)
}

// alloc returns n zero elements of step memory, counted in Allocs.
func (c *StepCPU) alloc(n int) tensor.Storage[float32] {
	c.Allocs++
	if n == 0 {
		return stepStore{h: tensor.Host[float32]{}, c: c, off: c.off, whole: true}
	}
	if list := c.free[n]; len(list) > 0 {
		b := list[len(list)-1]
		c.free[n] = list[:len(list)-1]
		c.freed -= n
		c.blocks[c.index(b.off)].live = true
		clear(b.h)
		c.Peak = max(c.Peak, c.InUse())
		return stepStore{h: b.h, c: c, off: b.off, whole: true}
	}
	b := stepBlock{off: c.off, h: make(tensor.Host[float32], n), live: true}
	c.blocks = append(c.blocks, b)
	c.off += n
	c.Peak = max(c.Peak, c.InUse())
	return stepStore{h: b.h, c: c, off: b.off, whole: true}
}

// AllocOut is Alloc with every element NaN instead of zero, so that an op that read its output before writing it would show.
func (c *StepCPU) AllocOut(n int) tensor.Storage[float32] {
	s := c.alloc(n)
	poison(tensor.HostData(s, "AllocOut"))
	return s
}

// AllocStatOut is AllocOut: every element NaN.
func (c *StepCPU) AllocStatOut(n int) tensor.Storage[float32] { return c.AllocOut(n) }

// AllocStat is Alloc.
func (c *StepCPU) AllocStat(n int) tensor.Storage[float32] { return c.Alloc(n) }

// Upload returns a copy of x in step memory.
func (c *StepCPU) Upload(x []float32, stat bool) tensor.Storage[float32] {
	s := c.alloc(len(x))
	copy(tensor.HostData(s, "Upload"), x)
	return s
}

// Attention is the CPU backend's, with out and lse copied into step memory.
func (c *StepCPU) Attention(d flex.Dims, q, k, v tensor.Storage[float32], m tensor.Mask, score *flex.ScoreProgram, scale float64) (out, lse tensor.Storage[float32]) {
	o, l := c.CPU.Attention(d, q, k, v, m, score, scale)
	return c.Upload(tensor.HostData(o, "attention out"), false), c.Upload(tensor.HostData(l, "attention lse"), true)
}

// index returns the position in c.blocks of the block at off.
func (c *StepCPU) index(off int) int {
	lo, hi := 0, len(c.blocks)
	for lo < hi {
		m := (lo + hi) / 2
		if c.blocks[m].off < off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(c.blocks) || c.blocks[lo].off != off {
		return -1
	}
	return lo
}

// FreesStep returns true: FreeStep gives memory back, as a device's step
// arena does.
func (c *StepCPU) FreesStep() bool { return true }

// FreeStep poisons s and puts it on the free list. s must be a whole live
// allocation of this backend's step memory.
func (c *StepCPU) FreeStep(s tensor.Storage[float32]) {
	x, ok := s.(stepStore)
	if !ok || x.c != c {
		panic(fmt.Sprintf("backendtest: FreeStep of %T storage, not this StepCPU's step memory", s))
	}
	if x.whole && len(x.h) == 0 {
		return
	}
	i := c.index(x.off)
	if !x.whole || i < 0 || len(c.blocks[i].h) != len(x.h) {
		panic(fmt.Sprintf("backendtest: FreeStep of %d elements at %d, not a whole allocation", len(x.h), x.off))
	}
	b := &c.blocks[i]
	if !b.live {
		panic(fmt.Sprintf("backendtest: FreeStep of %d elements at %d, already free", len(x.h), x.off))
	}
	poison(b.h)
	b.live = false
	if c.free == nil {
		c.free = map[int][]stepBlock{}
	}
	c.free[len(b.h)] = append(c.free[len(b.h)], *b)
	c.freed += len(b.h)
	c.Frees++
}

// MarkStep returns the position in step memory.
func (c *StepCPU) MarkStep() tensor.StepMark { return tensor.StepMark{int64(c.off)} }

// ReleaseStep poisons and forgets every block bumped since m, and the free
// list's entries among them.
func (c *StepCPU) ReleaseStep(m tensor.StepMark) {
	off := int(m[0])
	if off > c.off {
		panic(fmt.Sprintf("backendtest: ReleaseStep to %d, past the position %d", off, c.off))
	}
	for len(c.blocks) > 0 && c.blocks[len(c.blocks)-1].off >= off {
		poison(c.blocks[len(c.blocks)-1].h)
		c.blocks = c.blocks[:len(c.blocks)-1]
	}
	for n, list := range c.free {
		kept := list[:0]
		for _, b := range list {
			if b.off < off {
				kept = append(kept, b)
			} else {
				c.freed -= n
			}
		}
		c.free[n] = kept
	}
	c.off = off
}

// ResetStep releases all step memory.
func (c *StepCPU) ResetStep() { c.ReleaseStep(tensor.StepMark{}) }

func poison(h []float32) {
	for i := range h {
		h[i] = float32(math.NaN())
	}
}

// stepStore is StepCPU's storage: host elements at a position of its step
// memory. Like allocates step memory, as a device's gradients are.
type stepStore struct {
	h     tensor.Host[float32]
	c     *StepCPU
	off   int
	whole bool // a whole allocation, not a Slice of one
}

func (s stepStore) Len() int           { return len(s.h) }
func (s stepStore) DType() dtype.DType { return dtype.F32 }
func (s stepStore) HostSlice() []float32 {
	return s.h
}

func (s stepStore) Slice(lo, hi int) tensor.Storage[float32] {
	return stepStore{h: s.h[lo:hi:hi], c: s.c, off: s.off + lo}
}

func (s stepStore) Like(n int) tensor.Storage[float32] { return s.c.Alloc(n) }

// LikeOut is AllocOut, NaN-filled.
func (s stepStore) LikeOut(n int) tensor.Storage[float32] { return s.c.AllocOut(n) }
