package tensorcuda

import (
	"math"
	"strings"
	"testing"
	"unsafe"

	"dflash/dtype"
	"dflash/internal/testseed"
)

// TestDownloadIntoHost: AllocHost's memory comes from the device's
// page-locked allocator; a Download of fp32 storage (the master values)
// into it is one copy straight into that memory, bit for bit, while bf16
// storage (the compute copy) still comes back decoded; FreeHost gives the
// memory back, refuses memory it did not hand out, and Close frees what
// was not given back.
func TestDownloadIntoHost(t *testing.T) {
	b, _, _, mem := fakeBackend()
	rng := testseed.New(t)
	const n = 1000
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	values, compute := b.AllocParams(n, true)
	b.WriteParams(values, x)
	b.WriteParams(compute, x)
	h, err := b.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != n || len(mem.hosts) != 1 || !mem.hosts[(*byte)(unsafe.Pointer(&h[0]))] {
		t.Fatalf("AllocHost(%d): %d elements, %d page-locked allocations (want its memory to be the one)", n, len(h), len(mem.hosts))
	}
	mem.downloads = nil
	b.Download(values, h)
	if len(mem.downloads) != 1 || mem.downloads[0] != (*byte)(unsafe.Pointer(&h[0])) {
		t.Fatalf("fp32 Download: %d copies, into %p; want one, into the host buffer %p", len(mem.downloads), mem.downloads, &h[0])
	}
	for i, v := range x {
		if math.Float32bits(h[i]) != math.Float32bits(v) {
			t.Fatalf("master value %d came back %g, want %g", i, h[i], v)
		}
	}
	b.Download(compute, h)
	for i, v := range x {
		if want := dtype.BF16ToFloat32(dtype.Float32ToBF16(v)); h[i] != want {
			t.Fatalf("compute copy %d came back %g, want its bf16 rounding %g", i, h[i], want)
		}
	}
	if err := b.FreeHost(h); err != nil || len(mem.hosts) != 0 {
		t.Fatalf("FreeHost: %v, %d allocations left", err, len(mem.hosts))
	}
	if p := panicText(func() { b.FreeHost(h) }); !strings.Contains(p, "AllocHost did not return") {
		t.Fatalf("second FreeHost: panic %q", p)
	}
	if p := panicText(func() { b.FreeHost(make([]float32, 3)) }); !strings.Contains(p, "AllocHost did not return") {
		t.Fatalf("FreeHost of Go memory: panic %q", p)
	}
	if _, err := b.AllocHost(7); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if len(mem.hosts) != 0 {
		t.Fatalf("Close left %d page-locked allocations", len(mem.hosts))
	}
}
