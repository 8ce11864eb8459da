package gpu

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"dflash/cuda"
	"dflash/internal/testseed"
)

// fakeMemory hands out addresses from a budget of bytes.
type fakeMemory struct {
	capacity, used int64
	next           cuda.DevicePtr
	sizes          map[cuda.DevicePtr]int64
	allocs, frees  int
}

func newFakeMemory(capacity int64) *fakeMemory {
	return &fakeMemory{capacity: capacity, next: 1 << 20, sizes: map[cuda.DevicePtr]int64{}}
}

func (m *fakeMemory) alloc(n int64) (cuda.DevicePtr, error) {
	if m.used+n > m.capacity {
		return 0, &cuda.Error{Call: "cuMemAlloc_v2", Lib: "cuda", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory"}
	}
	p := m.next
	m.next += cuda.DevicePtr(n + 4096)
	m.sizes[p] = n
	m.used += n
	m.allocs++
	return p, nil
}

func (m *fakeMemory) free(p cuda.DevicePtr) error {
	n, ok := m.sizes[p]
	if !ok {
		return fmt.Errorf("cuMemFree_v2: unknown pointer %#x", p)
	}
	delete(m.sizes, p)
	m.used -= n
	m.frees++
	return nil
}

func (m *fakeMemory) info() (int64, int64, error) { return m.capacity - m.used, m.capacity, nil }

// mustAlloc returns a's allocation of n bytes, failing t when it fails.
func mustAlloc(t *testing.T, a *Allocator, n int64) Buffer {
	t.Helper()
	b, err := a.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSizeClass(t *testing.T) {
	rng := testseed.New(t)
	for _, c := range []struct{ n, want int64 }{
		{1, 512}, {512, 512}, {513, 1024}, {1 << 20, 1 << 20}, {1<<20 + 1, 2 << 20},
		{5 << 20, 6 << 20}, {16 << 20, 16 << 20}, {16<<20 + 1, 18 << 20}, {1 << 30, 1 << 30}, {1<<30 + 1, 1<<30 + 128<<20},
	} {
		if got := sizeClass(c.n); got != c.want {
			t.Errorf("sizeClass(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	for i := 0; i < 10000; i++ {
		n := int64(rng.ExpFloat64()*float64(64<<20)) + 1
		c := sizeClass(n)
		if c < n {
			t.Fatalf("sizeClass(%d) = %d < n", n, c)
		}
		if n > 1<<20 && float64(c-n) > 0.125*float64(n)+float64(2<<20) {
			t.Fatalf("sizeClass(%d) = %d wastes %d bytes", n, c, c-n)
		}
		if n > 16<<20 && float64(c-n) > 0.125*float64(n) {
			t.Fatalf("sizeClass(%d) = %d wastes more than 12.5%%", n, c)
		}
		if sizeClass(c) != c {
			t.Fatalf("class %d is not its own class", c)
		}
	}
}

func TestAllocatorReusesAcrossSteps(t *testing.T) {
	mem := newFakeMemory(1 << 30)
	a := newAllocator(0, mem)
	sizes := []int64{1000, 4096, 3 << 20, 100 << 20, 1000, 777}
	for step := 0; step < 5; step++ {
		var bufs []Buffer
		for _, n := range sizes {
			b := mustAlloc(t, a, n)
			if b.Size != n {
				t.Fatalf("buffer size %d, want %d", b.Size, n)
			}
			bufs = append(bufs, b)
		}
		seen := map[cuda.DevicePtr]bool{}
		for _, b := range bufs {
			if seen[b.Ptr] {
				t.Fatalf("step %d: pointer %#x handed out twice", step, b.Ptr)
			}
			seen[b.Ptr] = true
		}
		for _, b := range bufs {
			a.Free(b)
		}
	}
	st := a.Stats()
	if st.DeviceAllocs != int64(len(sizes)) || mem.allocs != len(sizes) {
		t.Errorf("device allocs %d (fake %d), want %d: later steps must reuse", st.DeviceAllocs, mem.allocs, len(sizes))
	}
	if st.Allocs != 5*int64(len(sizes)) || st.Reuses != 4*int64(len(sizes)) || st.Frees != st.Allocs {
		t.Errorf("stats %+v", st)
	}
	var classBytes int64
	for _, n := range sizes {
		classBytes += sizeClass(n)
	}
	if st.InUseBytes != 0 || st.CachedBytes != classBytes || st.PeakBytes != classBytes || st.LiveBuffers != 0 {
		t.Errorf("bytes: %+v, want cached = peak = %d", st, classBytes)
	}
	released, err := a.Release()
	if err != nil || released != classBytes || mem.used != 0 || a.Stats().CachedBytes != 0 {
		t.Errorf("Release = %d, %v; device still holds %d", released, err, mem.used)
	}
}

func TestAllocatorOOMReleasesCacheThenReports(t *testing.T) {
	mem := newFakeMemory(64 << 20)
	a := newAllocator(3, mem)
	keep := mustAlloc(t, a, 20<<20)
	cached := mustAlloc(t, a, 30<<20)
	a.Free(cached) // 30 MiB cached, 20 MiB in use, 14 MiB never allocated
	// 40 MiB fits only after the cache is released
	b, err := a.Alloc(40 << 20)
	if err != nil {
		t.Fatalf("alloc after releasing the cache: %v", err)
	}
	if st := a.Stats(); st.OOMRetries != 1 || st.CachedBytes != 0 {
		t.Errorf("stats %+v", st)
	}
	_, err = a.Alloc(8 << 20)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Fatalf("err = %v, want *OutOfMemoryError", err)
	}
	if oom.GPU != 3 || oom.Requested != 8<<20 || oom.InUse != 60<<20 || oom.Free != 4<<20 || oom.Total != 64<<20 {
		t.Errorf("OOM details %+v", oom)
	}
	for _, want := range []string{"gpu 3: out of memory allocating 8.0 MiB", "60.0 MiB in use by dflash", "0 B cached",
		"4.0 MiB free of 64.0 MiB", "CUDA_ERROR_OUT_OF_MEMORY"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
	a.Free(keep)
	a.Free(b)
}

// TestAllocatorMapped: a Range's mapping (Allocator.mapped) over the same
// fake device: its bytes count as mapped and in the peak, out of memory
// releases the cache and tries again, and a second failure is an
// *OutOfMemoryError that counts the mapped bytes as in use.
func TestAllocatorMapped(t *testing.T) {
	mem := newFakeMemory(64 << 20)
	a := newAllocator(1, mem)
	create := func(n int64) func() error {
		return func() error {
			if _, err := mem.alloc(n); err != nil {
				return &cuda.Error{Call: "cuMemCreate", Lib: "cuda", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
			}
			return nil
		}
	}
	if err := a.mapped(16<<20, nil, create(16<<20)); err != nil {
		t.Fatal(err)
	}
	b := mustAlloc(t, a, 30<<20)
	a.Free(b) // 30 MiB cached, 16 MiB mapped, 18 MiB never allocated
	if st := a.Stats(); st.MappedBytes != 16<<20 || st.PeakBytes != 46<<20 {
		t.Errorf("after a mapping and a cached block: %+v", st)
	}
	if err := a.mapped(32<<20, nil, create(32<<20)); err != nil {
		t.Fatalf("a mapping that fits after releasing the cache: %v", err)
	}
	if st := a.Stats(); st.OOMRetries != 1 || st.CachedBytes != 0 || st.MappedBytes != 48<<20 || st.PeakBytes != 48<<20 {
		t.Errorf("after the retried mapping: %+v", st)
	}
	err := a.mapped(32<<20, nil, create(32<<20))
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, cuda.ErrOutOfMemory) || oom.Requested != 32<<20 || oom.InUse != 48<<20 || oom.Free != 16<<20 {
		t.Fatalf("a mapping past the device: %v (%+v)", err, oom)
	}
	a.unmapped(48<<20, nil)
	if st := a.Stats(); st.MappedBytes != 0 {
		t.Errorf("after unmapping: %+v", st)
	}
}

func TestAllocatorMisuse(t *testing.T) {
	a := newAllocator(0, newFakeMemory(1<<20))
	b, _ := a.Alloc(100)
	a.Free(b)
	for name, f := range map[string]func(){
		"double free":   func() { a.Free(b) },
		"foreign":       func() { a.Free(Buffer{Ptr: 12345, Size: 1}) },
		"zero size":     func() { a.Alloc(0) },
		"negative size": func() { a.Alloc(-1) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		})
	}
}

// TestAllocatorResetPeaks: after ResetPeaks, the held peak is what is held
// then (the cached block counts) and the in-use peak what is in use then;
// both grow again from there.
func TestAllocatorResetPeaks(t *testing.T) {
	a := newAllocator(0, newFakeMemory(1<<30))
	big := mustAlloc(t, a, 64<<20)
	small := mustAlloc(t, a, 1<<20)
	a.Free(big)
	before := a.Stats()
	a.ResetPeaks()
	st := a.Stats()
	held, inUse := st.InUseBytes+st.CachedBytes+st.MappedBytes, st.InUseBytes+st.MappedBytes-st.PoolFreeBytes
	if st.PeakBytes != held || st.PeakInUseBytes != inUse || inUse >= before.PeakInUseBytes {
		t.Fatalf("after ResetPeaks: peaks %d held, %d in use; want %d, %d (before: %d, %d)", st.PeakBytes, st.PeakInUseBytes,
			held, inUse, before.PeakBytes, before.PeakInUseBytes)
	}
	again := mustAlloc(t, a, 64<<20) // the cached block: held stays, in use grows
	if st2 := a.Stats(); st2.PeakBytes != held || st2.PeakInUseBytes != st2.InUseBytes+st2.MappedBytes-st2.PoolFreeBytes {
		t.Fatalf("after a cached allocation: peaks %d held, %d in use; want %d held", st2.PeakBytes, st2.PeakInUseBytes, held)
	}
	a.Free(again)
	a.Free(small)
}

// TestAllocatorDirect: a direct block comes from the driver even when the
// cache holds one of its class, goes back to the driver when freed, and
// leaves the cache as it was; the held peak counts it.
func TestAllocatorDirect(t *testing.T) {
	mem := newFakeMemory(1 << 30)
	a := newAllocator(0, mem)
	cached := mustAlloc(t, a, 8<<20)
	a.Free(cached)
	before := a.Stats()
	d, err := a.allocDirect(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if d.Ptr == cached.Ptr {
		t.Fatal("allocDirect took the cached block")
	}
	if err := a.freeDirect(d); err != nil {
		t.Fatal(err)
	}
	st := a.Stats()
	if st.CachedBytes != before.CachedBytes || st.InUseBytes != before.InUseBytes || mem.used != before.CachedBytes ||
		st.DeviceAllocs != before.DeviceAllocs+1 || st.DeviceFrees != before.DeviceFrees+1 || st.PeakBytes < 2*before.CachedBytes {
		t.Fatalf("after a direct block: %+v (before %+v), driver holds %d", st, before, mem.used)
	}
	again := mustAlloc(t, a, 8<<20)
	if again.Ptr != cached.Ptr {
		t.Fatal("the cached block was not kept for the next allocation")
	}
	a.Free(again)
}
