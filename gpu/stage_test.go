package gpu

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"dflash/cuda"
)

// lazyDevice is a stageCopier whose copies run only when the host waits for
// them: a copy reads its staging bytes when the device runs it, as a real
// asynchronous copy does, so a stager that refilled a slot too early would
// leave the wrong bytes in mem.
type lazyDevice struct {
	mem    []byte
	queue  []func()
	marks  [stageSlots]int // queue length at each slot's last record
	allocs int
}

func (l *lazyDevice) allocHost(n int64) ([]byte, error) { l.allocs++; return make([]byte, n), nil }
func (l *lazyDevice) freeHost([]byte) error             { return nil }
func (l *lazyDevice) copyAsync(dst cuda.DevicePtr, src []byte) error {
	l.queue = append(l.queue, func() { copy(l.mem[dst:], src) })
	return nil
}
func (l *lazyDevice) record(slot int) error { l.marks[slot] = len(l.queue); return nil }
func (l *lazyDevice) wait(slot int) error {
	for i := 0; i < l.marks[slot]; i++ {
		if l.queue[i] != nil {
			l.queue[i]()
			l.queue[i] = nil
		}
	}
	return nil
}
func (l *lazyDevice) drain() {
	for _, f := range l.queue {
		if f != nil {
			f()
		}
	}
	l.queue = nil
}

// TestStagerReusesSlotsOnlyWhenRead stages uploads of random sizes (some
// larger than a slot, so split, many of several stageCopyGrain pieces,
// copied in parallel, and enough in all to go round the slots several
// times) into random places of a fake device's memory, whose copies run
// only when the host waits; every byte must arrive as uploaded.
func TestStagerReusesSlotsOnlyWhenRead(t *testing.T) {
	seed := uint64(7)
	rng := rand.New(rand.NewPCG(seed, 1))
	dev := &lazyDevice{mem: make([]byte, 3*stageSlots*stageSlotBytes)}
	want := make([]byte, len(dev.mem))
	s := &stager{c: dev}
	var staged int64
	waits := 0
	for staged < 3*stageSlots*stageSlotBytes {
		n := 1 + rng.IntN(stageSlotBytes/3)
		if rng.IntN(8) == 0 {
			n = stageSlotBytes + rng.IntN(stageSlotBytes) // split over slots
		}
		at := rng.IntN(len(dev.mem) - n)
		src := make([]byte, n)
		fill := byte(rng.Uint32()) // a byte pattern per upload: cheap, and distinct between uploads
		for i := range src {
			src[i] = fill + byte(i/4096)
		}
		w, err := s.stage(cuda.DevicePtr(at), src)
		if err != nil {
			t.Fatal(err)
		}
		waits += w
		copy(want[at:], src)
		clear(src) // the caller may reuse its buffer at once
		staged += int64(n)
	}
	dev.drain()
	if !bytes.Equal(dev.mem, want) {
		t.Fatalf("seed %d: device memory differs from the uploads after %d bytes staged", seed, staged)
	}
	if dev.allocs != stageSlots {
		t.Errorf("allocated %d staging slots, want %d", dev.allocs, stageSlots)
	}
	// Going round the slots 3 times must wait at every refill after the first round.
	if waits < 2*stageSlots || int64(waits) != s.waits {
		t.Errorf("%d waits (stager counted %d) for %d bytes staged, want at least %d", waits, s.waits, staged, 2*stageSlots)
	}
}

// TestStageRefusedInCapture: a copy staged while capturing would be replayed
// from reused staging memory, so Stage refuses it.
func TestStageRefusedInCapture(t *testing.T) {
	err := fakeWorker(t, 0).Run(func(d *Device) error {
		d.capturing = true
		return Stage(d, Buffer{Size: 8}, []byte{1, 2})
	})
	if !errors.Is(err, ErrStageInCapture) {
		t.Fatalf("Stage during capture: %v, want ErrStageInCapture", err)
	}
}
