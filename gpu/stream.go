package gpu

import (
	"time"

	"dflash/cuda"
)

// Stream is a CUDA stream of one device.
type Stream struct {
	d *Device
	h cuda.Stream
}

// Handle returns the raw stream for calls into package cuda.
func (s *Stream) Handle() cuda.Stream { return s.h }

// NewStream creates a non-blocking stream; the device destroys it on Close
// unless Destroy is called first.
func (d *Device) NewStream() (*Stream, error) {
	if err := d.check("NewStream"); err != nil {
		return nil, err
	}
	h, err := cuda.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return nil, err
	}
	s := &Stream{d: d, h: h}
	d.streams = append(d.streams, s)
	return s, nil
}

// Synchronize waits for the work queued on s.
func (s *Stream) Synchronize() error {
	if err := s.d.check("Stream.Synchronize"); err != nil {
		return err
	}
	s.d.count.sync()
	return cuda.StreamSynchronize(s.h)
}

// Wait makes later work on s wait for e.
func (s *Stream) Wait(e *Event) error {
	if err := s.d.check("Stream.Wait"); err != nil {
		return err
	}
	return cuda.StreamWaitEvent(s.h, e.h)
}

// Destroy destroys s (not the default stream).
func (s *Stream) Destroy() error {
	if s == s.d.main {
		panic("gpu: Destroy of the default stream")
	}
	if err := s.d.check("Stream.Destroy"); err != nil {
		return err
	}
	err := cuda.StreamDestroy(s.h)
	s.h = 0
	return err
}

// Event is a CUDA event with timing enabled.
type Event struct {
	d *Device
	h cuda.Event
}

// NewEvent creates an event; the device destroys it on Close unless Destroy
// is called first.
func (d *Device) NewEvent() (*Event, error) {
	if err := d.check("NewEvent"); err != nil {
		return nil, err
	}
	h, err := cuda.EventCreate(cuda.EventDefault)
	if err != nil {
		return nil, err
	}
	e := &Event{d: d, h: h}
	d.events = append(d.events, e)
	return e, nil
}

// Record records e on s (the default stream when nil).
func (e *Event) Record(s *Stream) error {
	if err := e.d.check("Event.Record"); err != nil {
		return err
	}
	if e.d.rec != nil {
		return ErrReplayHostWait // the event would mark the dry run, not the work
	}
	return cuda.EventRecord(e.h, e.d.stream(s).h)
}

// Synchronize waits until e has been reached.
func (e *Event) Synchronize() error {
	if err := e.d.check("Event.Synchronize"); err != nil {
		return err
	}
	e.d.count.sync()
	return cuda.EventSynchronize(e.h)
}

// Query reports whether e has been reached, without waiting.
func (e *Event) Query() (bool, error) {
	if err := e.d.check("Event.Query"); err != nil {
		return false, err
	}
	return cuda.EventQuery(e.h)
}

// Since returns the GPU time between start and e, both recorded and reached.
func (e *Event) Since(start *Event) (time.Duration, error) {
	if err := e.d.check("Event.Since"); err != nil {
		return 0, err
	}
	ms, err := cuda.EventElapsedTime(start.h, e.h)
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}

// Destroy destroys e.
func (e *Event) Destroy() error {
	if err := e.d.check("Event.Destroy"); err != nil {
		return err
	}
	err := cuda.EventDestroy(e.h)
	e.h = 0
	return err
}
