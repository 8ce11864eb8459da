package tensorcuda

import (
	"fmt"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/switches"
	"dflash/internal/testseed"
)

// TestGPUStepArenaVMM: on the device the step arena is one range grown in
// place. Five 40 MiB allocations are contiguous and back 256 MiB in 64 MiB
// steps; a pattern written into one that crosses a step's boundary reads
// back scaled by a kernel and copied (cuMemcpy) into another that crosses
// the next; after ResetStep the same allocations get the same addresses and
// map nothing more; a larger allocation grows the range further; releasing
// the arena unmaps everything, and the arena then starts a range afresh.
func TestGPUStepArenaVMM(t *testing.T) {
	w, cache := gputest.Worker0Cache(t)
	t.Setenv(switches.StepVMM.Name, "1")
	rng := testseed.New(t)
	const mib = 1 << 20
	const each = 40 * mib // bytes of each allocation: 20 Mi bf16 elements
	err := w.Run(func(d *gpu.Device) error {
		ok, err := d.VMMSupported()
		if err != nil || !ok {
			return fmt.Errorf("GPU 0 reports virtual memory management supported = %v (%v)", ok, err)
		}
		b, err := NewBackend(cache, d)
		if err != nil {
			return err
		}
		closed := false
		defer func() {
			if !closed {
				b.Close()
			}
		}()
		mapped0 := d.AllocStats().MappedBytes
		step := func() []Buf {
			var bufs []Buf
			for range 5 {
				bufs = append(bufs, b.AllocOut(each/2).(Buf))
			}
			return bufs
		}
		first := step()
		for i := 1; i < len(first); i++ {
			if first[i].ptr != first[i-1].ptr+each {
				t.Errorf("allocation %d at %#x, want right after allocation %d at %#x", i, uint64(first[i].ptr), i-1, uint64(first[i-1].ptr))
			}
		}
		r := b.arena.vm.(*rangeMemory).r
		st := b.StepBytes()
		if !st.InPlace || st.Reserved != 256*mib || st.Chunks != 1 || d.AllocStats().MappedBytes-mapped0 != 256*mib || r.Mapped() != 256*mib {
			t.Errorf("after 200 MiB: %+v, range mapped %d, device mapped %d; want 256 MiB in place", st, r.Mapped(), d.AllocStats().MappedBytes-mapped0)
		}
		t.Logf("range of %d MiB reserved at %#x, granularity %d KiB", r.Size()/mib, uint64(r.Base()), r.Granularity()>>10)
		if b.arena.chunk%r.Granularity() != 0 {
			t.Errorf("the growth step %d is not a multiple of the granularity %d", b.arena.chunk, r.Granularity())
		}
		// [40, 80) MiB crosses the step at 64; [120, 160) the one at 128.
		if err := checkPattern(d, b, first[1], first[3], rng.Uint32()); err != nil {
			return err
		}
		b.ResetStep()
		second := step()
		for i := range second {
			if second[i].ptr != first[i].ptr {
				t.Errorf("after ResetStep allocation %d at %#x, before at %#x", i, uint64(second[i].ptr), uint64(first[i].ptr))
			}
		}
		if err := checkPattern(d, b, second[1], second[3], rng.Uint32()); err != nil {
			return err
		}
		if st := b.StepBytes(); st.Reserved != 256*mib || st.MostReserved != 256*mib || r.Mapped() != 256*mib {
			t.Errorf("the repeated step: %+v, range mapped %d; want 256 MiB reserved, as before", st, r.Mapped())
		}
		big := b.AllocOut(300 * mib / 2).(Buf) // up to 500 MiB: backed to 512
		if big.ptr != second[4].ptr+each || r.Mapped() != 512*mib {
			t.Errorf("300 MiB more at %#x with %d MiB mapped; want %#x and 512 MiB", uint64(big.ptr), r.Mapped()/mib, uint64(second[4].ptr+each))
		}
		if err := checkPattern(d, b, big, second[0], rng.Uint32()); err != nil {
			return err
		}
		b.ResetStep()
		b.arena.releaseAll()
		if m := d.AllocStats().MappedBytes - mapped0; m != 0 || b.StepBytes().Reserved != 0 {
			t.Errorf("after releasing the arena %d bytes are mapped, %d reserved", m, b.StepBytes().Reserved)
		}
		again := b.AllocOut(each / 2).(Buf)
		if err := checkPattern(d, b, again, b.AllocOut(each/2).(Buf), rng.Uint32()); err != nil {
			return err
		}
		b.Close()
		closed = true
		if m := d.AllocStats().MappedBytes - mapped0; m != 0 {
			t.Errorf("after Close %d bytes are mapped", m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkPattern uploads small integers (exact in bf16) drawn from seed into
// x, scales them by 2 with the Scale kernel, copies as much of x as y holds
// into y with cuMemcpy and checks both against the host's values.
func checkPattern(d *gpu.Device, b *Backend, x, y Buf, seed uint32) error {
	vals := make([]float32, x.n)
	for i := range vals {
		vals[i] = float32(int32((uint32(i)*2654435761+seed)>>24) - 128)
	}
	raw := make([]byte, 2*x.n)
	dtype.EncodeFloat32(dtype.BF16, raw, vals)
	if err := gpu.Upload(d, x.Buffer(), raw); err != nil {
		return err
	}
	b.Scale(2, x)
	if err := d.CopyAsync(y.Buffer(), x.Buffer(), int64(2*min(x.n, y.n)), nil); err != nil {
		return err
	}
	for _, s := range []struct {
		name string
		buf  Buf
	}{{"scaled", x}, {"copied", y}} {
		got := make([]float32, s.buf.n)
		b.Download(s.buf, got)
		for i, v := range vals[:min(x.n, s.buf.n)] {
			if got[i] != 2*v {
				return fmt.Errorf("%s pattern at %#x: element %d (byte %d) is %g, want %g", s.name, uint64(s.buf.ptr), i, 2*i, got[i], 2*v)
			}
		}
	}
	return nil
}
