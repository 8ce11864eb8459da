package gpu

import (
	"testing"

	"dflash/internal/testseed"
)

// TestPoolInUse: over random allocations and frees of plain buffers and of
// a pool's chunks and mappings, and random in-use reports of the pool, the
// allocator's in-use peak is the most that plain buffers (block bytes) and
// the pool's reported bytes held at one moment, not the sum of their own
// peaks, while its held peak counts the pool's chunks and mappings whole;
// the bytes in use now are plain buffers plus the pool's report.
func TestPoolInUse(t *testing.T) {
	rng := testseed.New(t)
	mem := newFakeMemory(1 << 40)
	a := newAllocator(0, mem)
	pool := &Pool{}
	var plain []Buffer
	var chunks []Buffer
	var plainBytes, poolHeld, poolUse, peakUse, peakPlain, peakPool, mapped int64
	note := func() {
		peakUse = max(peakUse, plainBytes+poolUse)
		peakPlain, peakPool = max(peakPlain, plainBytes), max(peakPool, poolUse)
	}
	for i := range 2000 {
		switch rng.IntN(6) {
		case 0: // a plain buffer
			n := 1 + rng.Int64N(8<<20)
			b, err := a.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			plain, plainBytes = append(plain, b), plainBytes+sizeClass(n)
		case 1: // free a plain buffer
			if len(plain) > 0 {
				j := rng.IntN(len(plain))
				a.Free(plain[j])
				plainBytes -= sizeClass(plain[j].Size)
				plain = append(plain[:j], plain[j+1:]...)
			}
		case 2: // a pool chunk
			n := int64(1+rng.IntN(4)) << 22
			b, err := a.alloc(n, pool)
			if err != nil {
				t.Fatal(err)
			}
			chunks, poolHeld = append(chunks, b), poolHeld+sizeClass(n)
		case 3: // a pool mapping
			n := int64(1+rng.IntN(4)) << 21
			if err := a.mapped(n, pool, func() error { return nil }); err != nil {
				t.Fatal(err)
			}
			mapped, poolHeld = mapped+n, poolHeld+n
		case 4: // the pool hands out or takes back
			poolUse = rng.Int64N(poolHeld + 1)
			a.setInUse(pool, poolUse)
		case 5: // the pool ends a step and gives everything back
			poolUse = 0
			a.setInUse(pool, 0)
			for _, b := range chunks {
				a.free(b, pool)
			}
			a.unmapped(mapped, pool)
			chunks, mapped, poolHeld = nil, 0, 0
		}
		note()
		st := a.Stats()
		if got := st.InUseBytes + st.MappedBytes - st.PoolFreeBytes; got != plainBytes+poolUse || st.PeakInUseBytes != peakUse || pool.held != poolHeld {
			t.Fatalf("event %d: in use %d, peak %d, pool holds %d; want %d, %d, %d", i, got, st.PeakInUseBytes, pool.held, plainBytes+poolUse, peakUse, poolHeld)
		}
		if st.PeakBytes < st.PeakInUseBytes || st.InUseBytes+st.MappedBytes < plainBytes+poolHeld {
			t.Fatalf("event %d: held peak %d below the in-use peak %d, or held %d below %d", i, st.PeakBytes, st.PeakInUseBytes, st.InUseBytes+st.MappedBytes, plainBytes+poolHeld)
		}
	}
	t.Logf("in-use peak %d bytes; the plain buffers' own peak %d plus the pool's %d would say %d; held peak %d",
		peakUse, peakPlain, peakPool, peakPlain+peakPool, a.Stats().PeakBytes)
	if peakUse >= peakPlain+peakPool {
		t.Errorf("the sequence never had both at their peaks apart: in-use peak %d, sum of peaks %d", peakUse, peakPlain+peakPool)
	}
}
