package tensorcuda

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/internal/switches"
	"dflash/internal/testseed"
)

// arenaOp is one event of a step: an allocation of n bytes, or the free of
// the live allocation at index free of the step's allocations.
type arenaOp struct {
	n    int64
	free int // index of the allocation to free; -1 for an allocation
}

// randomStep draws a step of allocations (sizes from a few classes, so
// that frees get reused) and frees of live allocations.
func randomStep(t *testing.T) []arenaOp {
	rng := testseed.New(t)
	sizes := []int64{1, 200, 256, 1000, 3000, 5000, 9000, 20000}
	var ops []arenaOp
	var live []int
	allocs := 0
	for range 300 {
		if len(live) > 0 && rng.IntN(3) == 0 {
			k := rng.IntN(len(live))
			ops = append(ops, arenaOp{free: live[k]})
			live = slices.Delete(live, k, k+1)
			continue
		}
		ops = append(ops, arenaOp{n: sizes[rng.IntN(len(sizes))], free: -1})
		live = append(live, allocs)
		allocs++
	}
	return ops
}

// runStep runs ops on a, checking that no allocation overlaps a live one
// and that the arena's bytes in use are those of the live allocations; it
// returns the addresses and the most bytes live at once.
func runStep(t *testing.T, a *stepArena, ops []arenaOp) (addrs []cuda.DevicePtr, most int64) {
	t.Helper()
	type block struct {
		p    cuda.DevicePtr
		n    int64
		live bool
	}
	var blocks []block
	var live int64
	for i, op := range ops {
		if op.free >= 0 {
			b := &blocks[op.free]
			a.release(b.p, b.n)
			b.live = false
			live -= aligned(b.n)
		} else {
			p, err := a.alloc(op.n)
			if err != nil {
				t.Fatal(err)
			}
			for j, b := range blocks {
				if b.live && p < b.p+cuda.DevicePtr(aligned(b.n)) && b.p < p+cuda.DevicePtr(aligned(op.n)) {
					t.Fatalf("op %d: %d bytes at %#x overlap live allocation %d at %#x", i, op.n, uint64(p), j, uint64(b.p))
				}
			}
			blocks = append(blocks, block{p, op.n, true})
			addrs = append(addrs, p)
			live += aligned(op.n)
		}
		if a.inUse() != live {
			t.Fatalf("op %d: the arena counts %d bytes in use, %d are live", i, a.inUse(), live)
		}
		if u, ok := a.use.(*useLog); ok && u.last != live {
			t.Fatalf("op %d: the arena told its user %d bytes in use, %d are live", i, u.last, live)
		}
		most = max(most, live)
	}
	return addrs, most
}

// TestStepArenaFreeList: freed blocks are reused by allocations of their
// aligned size, last freed first, never by another size; the bytes in use
// and the peak follow, and the arena's user (the device's pool) is told
// the bytes in use at every change, 0 after reset; two identical steps with frees get identical
// addresses in one chunk after the first step's chunks are consolidated.
func TestStepArenaFreeList(t *testing.T) {
	for _, kind := range arenaKinds {
		t.Run(kind, func(t *testing.T) { testFreeList(t, newTestArena(kind, 4096)) })
	}

	ops := randomStep(t)
	use := &useLog{}
	b := &stepArena{mem: newFakeMem(), chunk: 4096, use: use}
	runStep(t, b, ops)
	if len(b.chunks) < 2 {
		t.Fatalf("the random step took %d chunks; the test needs several", len(b.chunks))
	}
	high := b.high
	b.reset()
	if len(b.chunks) != 1 || b.chunks[0].Size != (high+4095)/4096*4096 {
		t.Fatalf("after reset: %d chunks, the first of %d bytes; want one of the high-water mark %d rounded up to 4096", len(b.chunks), b.chunks[0].Size, high)
	}
	second, most := runStep(t, b, ops)
	b.reset()
	allocs := b.mem.(*fakeMem).Allocs
	third, _ := runStep(t, b, ops)
	if !slices.Equal(second, third) {
		t.Error("two identical steps with frees got different addresses")
	}
	if n := b.mem.(*fakeMem).Allocs - allocs; n != 0 || len(b.chunks) != 1 {
		t.Errorf("the repeated step allocated %d chunks and holds %d", n, len(b.chunks))
	}
	if b.peak != most || use.most != most {
		t.Errorf("peak %d, told the user %d at most; the most bytes live at once %d", b.peak, use.most, most)
	}
	b.reset()
	if use.last != 0 {
		t.Errorf("after reset the user was last told %d bytes in use", use.last)
	}
	t.Logf("random step: peak %d bytes live, high-water %d bumped, one chunk of %d", most, high, b.chunks[0].Size)
}

// useLog is a step arena's user (gpu.Pool on a device): it keeps the
// bytes in use it was told last and at most.
type useLog struct{ last, most int64 }

func (u *useLog) SetInUse(n int64) { u.last, u.most = n, max(u.most, n) }

// arenaKinds are the step arena's two memories: chunks from the device
// allocator and one range grown in place.
var arenaKinds = []string{"chunks", "in-place"}

// newTestArena returns an arena of kind over fake memory, growing by chunk
// bytes (over a range of 512-byte granules in place).
func newTestArena(kind string, chunk int64) *stepArena {
	mem := newFakeMem()
	a := &stepArena{mem: mem, chunk: chunk}
	if kind == "in-place" {
		a.vm = &fakeRange{m: mem, gran: 512}
	}
	return a
}

// fakeRange is growable memory over a fakeMem: one block at an address
// reserved with room to spare, whose host bytes grow in granules of gran.
type fakeRange struct {
	m     *fakeMem
	gran  int64
	base  cuda.DevicePtr
	grows []int64 // the bytes backed after each grow that backed more
}

func (r *fakeRange) grow(n int64) (gpu.Buffer, error) {
	if r.base == 0 {
		r.base = r.m.Reserve(1 << 40)
	}
	old := r.m.Size(r.base)
	n = (n + r.gran - 1) / r.gran * r.gran
	if n <= old {
		return gpu.Buffer{Ptr: r.base, Size: old}, nil
	}
	if add := n - old; r.m.Limit > 0 && r.m.Used()+add > r.m.Limit {
		return gpu.Buffer{}, &gpu.OutOfMemoryError{Requested: add, Block: add, InUse: r.m.Used(), Total: r.m.Limit, Err: cuda.ErrOutOfMemory}
	}
	r.m.Resize(r.base, n)
	r.grows = append(r.grows, n)
	return gpu.Buffer{Ptr: r.base, Size: n}, nil
}

func (r *fakeRange) release() {
	r.m.Free(gpu.Buffer{Ptr: r.base, Size: r.m.Size(r.base)})
	r.base = 0
}

// testFreeList: the free list's reuse and the accounting on arena a.
func testFreeList(t *testing.T, a *stepArena) {
	x, _ := a.alloc(1000)
	y, _ := a.alloc(1000)
	z, _ := a.alloc(3000)
	a.release(x, 1000)
	a.release(y, 900) // the same aligned size: 1024
	if got := a.inUse(); got != aligned(3000) {
		t.Errorf("in use after two frees: %d, want %d", got, aligned(3000))
	}
	if p, _ := a.alloc(2000); p == x || p == y {
		t.Errorf("an allocation of another size took a freed block")
	}
	if p, _ := a.alloc(1024); p != y {
		t.Errorf("first reuse at %#x, want the last freed %#x", uint64(p), uint64(y))
	}
	if p, _ := a.alloc(800); p != x {
		t.Errorf("second reuse at %#x, want %#x", uint64(p), uint64(x))
	}
	if want := 2*aligned(1000) + aligned(3000) + aligned(2000); a.peak != want || a.inUse() != want {
		t.Errorf("peak %d, in use %d; want %d", a.peak, a.inUse(), want)
	}
	a.release(z, 3000)
	if p := panicText(func() { a.release(z, 3000) }); !strings.Contains(p, "already free") {
		t.Errorf("double free: panic %q", p)
	}
	if p := panicText(func() { a.release(z+cuda.DevicePtr(1<<20), 256) }); !strings.Contains(p, "not handed out") {
		t.Errorf("free of memory never handed out: panic %q", p)
	}
	a.reset()
	if p, _ := a.alloc(3000); p != a.chunks[0].Ptr {
		t.Errorf("after reset an allocation took a block of the last step's free list at %#x", uint64(p))
	}
	a.releaseAll()
	if n := a.mem.(*fakeMem).Live(); n != 0 || a.reserved() != 0 {
		t.Errorf("releaseAll left %d device blocks, %d bytes reserved", n, a.reserved())
	}
}

// TestStepArenaInPlace: over a range grown in place the arena backs its
// memory in steps of chunk bytes as the bump pointer passes the backed end;
// every address lies in the one range; what is reserved is the high-water
// mark rounded up to chunk; identical steps get the first step's addresses
// with no more growth; releaseAll frees the range.
func TestStepArenaInPlace(t *testing.T) {
	const chunk = 4096
	a := newTestArena("in-place", chunk)
	r, mem := a.vm.(*fakeRange), a.mem.(*fakeMem)
	ops := randomStep(t)
	first, most := runStep(t, a, ops)
	high := a.high
	if len(r.grows) < 3 {
		t.Fatalf("the random step grew the range %d times; the test needs several", len(r.grows))
	}
	for i, n := range r.grows {
		if n%chunk != 0 || i > 0 && n <= r.grows[i-1] {
			t.Errorf("grow %d backed %d bytes (after %v): want growing multiples of %d", i, n, r.grows[:i], chunk)
		}
	}
	want := (high + chunk - 1) / chunk * chunk
	if st := a.reserved(); len(a.chunks) != 1 || st != want || a.most != want || mem.Used() != want {
		t.Errorf("after the step: %d chunks, %d reserved, %d most, %d on the device; want one range of the high-water mark %d rounded up to %d",
			len(a.chunks), st, a.most, mem.Used(), high, want)
	}
	for i, p := range first {
		if p < r.base || p >= r.base+cuda.DevicePtr(want) {
			t.Fatalf("allocation %d at %#x is outside the range [%#x, +%d)", i, uint64(p), uint64(r.base), want)
		}
	}
	grows := len(r.grows)
	for step := range 2 {
		a.reset()
		again, _ := runStep(t, a, ops)
		if !slices.Equal(again, first) {
			t.Errorf("step %d: an identical step got other addresses than the first", step+2)
		}
	}
	if len(r.grows) != grows || a.reserved() != want || a.peak != most {
		t.Errorf("the repeated steps grew the range %d times; reserved %d (want %d), peak %d (want %d)", len(r.grows)-grows, a.reserved(), want, a.peak, most)
	}
	t.Logf("random step: peak %d bytes live, high-water %d bumped, %d reserved in %d growths", most, high, want, grows)
	a.releaseAll()
	if mem.Live() != 0 || a.reserved() != 0 {
		t.Errorf("releaseAll left %d device blocks, %d bytes reserved", mem.Live(), a.reserved())
	}
}

// TestStepArenaInPlaceOOM: a growth that cannot be had in a whole chunk
// backs only what the allocation needs; one past the device is an error
// naming the sizes that RecoverOOM turns into the function's error.
func TestStepArenaInPlaceOOM(t *testing.T) {
	b, _, _, mem := fakeBackend()
	b.arena.chunk, b.arena.vm, mem.Limit = 4096, &fakeRange{m: mem, gran: 512}, 4096+1000
	b.Alloc(750)  // bf16: 1500 bytes, aligned to 1536
	b.Alloc(1000) // 2048 more: up to 3584, in the first chunk
	b.Alloc(450)  // 1024 more: up to 4608, past a chunk; two chunks exceed the device, 4608 fit
	if st := b.StepBytes(); st.Reserved != 4096+512 || !st.InPlace || st.Chunks != 1 {
		t.Errorf("after a growth short of a chunk: %+v; want 4608 reserved in place", st)
	}
	err := func() (err error) {
		defer RecoverOOM(&err)
		b.Alloc(1000)
		return nil
	}()
	var oom *gpu.OutOfMemoryError
	if !errors.As(err, &oom) || !strings.Contains(err.Error(), "backing 8192 bytes, or 6656 at least (2048 more at offset 4608; 4608 backed)") {
		t.Errorf("an allocation past the device: %v", err)
	}
	b.Close()
	if mem.Live() != 0 {
		t.Errorf("Close left %d device blocks", mem.Live())
	}
}

// TestStepArenaRewind: ReleaseStep after frees forgets the free blocks past
// the mark (their addresses are bumped again), keeps those before it, and
// counts the bytes in use as the blocks before the mark not freed.
func TestStepArenaRewind(t *testing.T) {
	for _, kind := range arenaKinds {
		t.Run(kind, func(t *testing.T) { testRewind(t, newTestArena(kind, 1<<16)) })
	}
}

func testRewind(t *testing.T, a *stepArena) {
	keep, _ := a.alloc(512)
	before, _ := a.alloc(1000)
	m := a.mark()
	after, _ := a.alloc(1000)
	a.alloc(3000)
	a.release(after, 1000)
	a.release(before, 1000)
	a.rewind(m)
	if got := a.inUse(); got != 512 {
		t.Errorf("in use after rewind: %d, want the 512 bytes kept before the mark", got)
	}
	if p, _ := a.alloc(1000); p != before {
		t.Errorf("first allocation after rewind at %#x, want the block freed before the mark %#x", uint64(p), uint64(before))
	}
	if p, _ := a.alloc(1000); p != after {
		t.Errorf("second allocation after rewind at %#x, want the mark's position %#x (bumped, not from the dropped free list)", uint64(p), uint64(after))
	}
	if p, _ := a.alloc(512); p == keep {
		t.Error("storage kept before the mark was handed out again")
	}
}

// TestFreeStep: the backend frees whole step allocations only; a Slice,
// parameter memory or storage of an earlier step panics.
func TestFreeStep(t *testing.T) {
	b, _, _, _ := fakeBackend()
	_, param := b.AllocParams(8, true)
	s := b.Alloc(1000)
	b.FreeStep(s)
	if p := b.Alloc(1000).(Buf).ptr; p != s.(Buf).ptr {
		t.Errorf("the freed storage was not reused: %#x, want %#x", uint64(p), uint64(s.(Buf).ptr))
	}
	g := s.Like(1000) // a gradient of step storage
	b.FreeStep(g)
	if p := panicText(func() { b.FreeStep(b.Alloc(100).Slice(0, 50)) }); !strings.Contains(p, "Slice view") {
		t.Errorf("FreeStep of a Slice: panic %q", p)
	}
	if p := panicText(func() { b.FreeStep(param) }); !strings.Contains(p, "parameter memory") {
		t.Errorf("FreeStep of a parameter: panic %q", p)
	}
	old := b.Alloc(10)
	b.ResetStep()
	if p := panicText(func() { b.FreeStep(old) }); !strings.Contains(p, "used after ResetStep") {
		t.Errorf("FreeStep of an earlier step's storage: panic %q", p)
	}
}

// TestStepInPlace: DFLASH_STEP_VMM chooses the step arena's memory: off
// chunks, on the range (an error naming the GPU where it has no VMM), unset
// whatever the GPU supports; a value that is not a boolean is an error
// naming the variable.
func TestStepInPlace(t *testing.T) {
	yes := func() (bool, error) { return true, nil }
	no := func() (bool, error) { return false, nil }
	broken := func() (bool, error) { return false, errors.New("cuDeviceGetAttribute: CUDA_ERROR_INVALID_DEVICE") }
	for _, c := range []struct {
		env       string
		supported func() (bool, error)
		want      bool
		err       string
	}{
		{"", yes, true, ""}, {"", no, false, ""}, {"1", yes, true, ""}, {"on", yes, true, ""}, {"0", yes, false, ""},
		{"off", yes, false, ""}, {"0", broken, false, ""},
		{"1", no, false, "DFLASH_STEP_VMM is on, but GPU 3 does not support"},
		{"", broken, false, "step memory on GPU 3: cuDeviceGetAttribute"},
		{"maybe", yes, false, `DFLASH_STEP_VMM="maybe": want a boolean`},
	} {
		t.Setenv(switches.StepVMM.Name, c.env)
		got, err := stepInPlace(3, c.supported)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("DFLASH_STEP_VMM=%q: %v, %v; want %v, error containing %q", c.env, got, err, c.want, c.err)
		}
	}
}
