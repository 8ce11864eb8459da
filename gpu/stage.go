package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"dflash/cuda"
)

// Staged uploads: Stage copies the host data into page-locked staging
// memory and queues the device copy from there, so the host never waits
// for the device to drain its queue (Upload does). The staging memory is
// stageSlots slots of stageSlotBytes, filled in turn; a slot is refilled
// only once the device has passed the last copy out of it (an event per
// slot), so the host waits only when it is that far ahead of the device.

const (
	stageSlotBytes = 16 << 20
	stageSlots     = 4
)

// stageCopier is what a stager needs from the device: pinned memory, a
// copy queued on the default stream, and an event per slot (faked in CPU
// tests).
type stageCopier interface {
	allocHost(n int64) ([]byte, error)
	freeHost(b []byte) error
	copyAsync(dst cuda.DevicePtr, src []byte) error
	record(slot int) error // marks the queue's end as the slot's last use
	wait(slot int) error   // waits until the device has passed that mark
}

// stager hands out staging space in slot order.
type stager struct {
	c       stageCopier
	slots   [stageSlots][]byte
	pending [stageSlots]bool // an event marks copies the device may not have run
	cur     int
	off     int64
	waits   int64 // host waits for a slot (tests and Counters)
}

// stage queues copies of src into dst (src fits dst), splitting src at slot
// boundaries, and reports how many times the host waited for a slot.
func (s *stager) stage(dst cuda.DevicePtr, src []byte) (waits int, err error) {
	for len(src) > 0 {
		if s.slots[s.cur] == nil {
			if s.slots[s.cur], err = s.c.allocHost(stageSlotBytes); err != nil {
				return waits, fmt.Errorf("staging memory: %w", err)
			}
		}
		if s.off == stageSlotBytes {
			if err := s.next(&waits); err != nil {
				return waits, err
			}
			continue
		}
		n := min(int64(len(src)), stageSlotBytes-s.off)
		buf := s.slots[s.cur][s.off : s.off+n]
		copyParallel(buf, src[:n])
		if err := s.c.copyAsync(dst, buf); err != nil {
			return waits, err
		}
		s.off += n
		dst += cuda.DevicePtr(n)
		src = src[n:]
	}
	return waits, nil
}

// stageCopyGrain is the piece of a copy into staging memory that one
// goroutine makes: a large upload (a model's weights, slot after slot) is
// copied by several cores, not only by the worker's thread, so that the
// copy keeps up with the device's transfers.
const stageCopyGrain = 4 << 20

// copyParallel copies src into dst (as long), in pieces of stageCopyGrain
// on up to GOMAXPROCS goroutines when it is at least two pieces long.
func copyParallel(dst, src []byte) {
	pieces := (len(src) + stageCopyGrain - 1) / stageCopyGrain
	if pieces < 2 {
		copy(dst, src)
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, pieces)
	for lo := 0; lo < len(src); lo += stageCopyGrain {
		next <- lo
	}
	close(next)
	for range min(runtime.GOMAXPROCS(0), pieces) {
		wg.Go(func() {
			for lo := range next {
				hi := min(len(src), lo+stageCopyGrain)
				copy(dst[lo:hi], src[lo:hi])
			}
		})
	}
	wg.Wait()
}

// next closes the current slot (marks its copies) and moves to the next,
// waiting for that one's last copies if they may not have run.
func (s *stager) next(waits *int) error {
	if err := s.c.record(s.cur); err != nil {
		return err
	}
	s.pending[s.cur] = true
	s.cur, s.off = (s.cur+1)%stageSlots, 0
	if s.pending[s.cur] {
		*waits++
		s.waits++
		if err := s.c.wait(s.cur); err != nil {
			return err
		}
		s.pending[s.cur] = false
	}
	return nil
}

// free releases the staging memory; the caller has synchronised the device.
func (s *stager) free() error {
	var errs []error
	for i, b := range s.slots {
		if b != nil {
			errs = append(errs, s.c.freeHost(b))
			s.slots[i] = nil
		}
	}
	return errors.Join(errs...)
}

// cudaStage is a device's stageCopier.
type cudaStage struct {
	d  *Device
	ev [stageSlots]cuda.Event
}

func (c *cudaStage) allocHost(n int64) ([]byte, error) { return cuda.MemAllocHost(n) }
func (c *cudaStage) freeHost(b []byte) error           { return cuda.MemFreeHost(b) }
func (c *cudaStage) copyAsync(dst cuda.DevicePtr, src []byte) error {
	return cuda.MemcpyHtoDAsync(dst, unsafe.Pointer(&src[0]), int64(len(src)), c.d.main.h)
}
func (c *cudaStage) record(slot int) error {
	if c.ev[slot] == 0 {
		e, err := cuda.EventCreate(cuda.EventDisableTiming)
		if err != nil {
			return err
		}
		c.ev[slot] = e
	}
	return cuda.EventRecord(c.ev[slot], c.d.main.h)
}
func (c *cudaStage) wait(slot int) error { return cuda.EventSynchronize(c.ev[slot]) }

func (c *cudaStage) destroy() error {
	var errs []error
	for i, e := range c.ev {
		if e != 0 {
			errs = append(errs, cuda.EventDestroy(e))
			c.ev[i] = 0
		}
	}
	return errors.Join(errs...)
}

// ErrStageInCapture is returned by Stage while the device captures a graph:
// a captured copy would read the staging memory again at every replay,
// long after it holds other data.
var ErrStageInCapture = errors.New("gpu: host->device copy inside a CUDA graph capture")

// Stage copies src into the start of b in order with the work queued on
// the default stream, without waiting for that work: src is copied into
// page-locked staging memory first, so it may be reused as soon as Stage
// returns, and the device reads the copy before any work queued after it.
// It counts as one host->device copy, plus one synchronisation when the
// host had to wait for staging memory (it is 64 MiB of copies ahead).
func Stage[T Element](d *Device, b Buffer, src []T) error {
	n, err := hostCopy(d, "Stage", b, src)
	if n == 0 || err != nil {
		return err
	}
	if d.capturing {
		return ErrStageInCapture
	}
	if d.stage == nil {
		d.stageDev = &cudaStage{d: d}
		d.stage = &stager{c: d.stageDev}
	}
	d.count.htod(n)
	waits, err := d.stage.stage(b.Ptr, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), n))
	for range waits {
		d.count.sync()
	}
	runtime.KeepAlive(src)
	return err
}

// closeStage frees the staging memory and its events (device close).
func (d *Device) closeStage() error {
	if d.stage == nil {
		return nil
	}
	err := errors.Join(d.stage.free(), d.stageDev.destroy())
	d.stage, d.stageDev = nil, nil
	return err
}
