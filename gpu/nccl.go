package gpu

import (
	"errors"
	"fmt"

	"dflash/cuda"
	"dflash/dtype"
)

// Comm is one rank of an NCCL communicator, owned by a device's worker.
type Comm struct {
	d          *Device
	c          cuda.Comm
	rank, size int
}

// Rank returns this communicator's rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.size }

// JoinComm joins rank of an nranks communicator identified by id (made once
// by cuda.NCCLGetUniqueID and shared with every rank, across processes too).
// It blocks until all ranks have joined.
func (d *Device) JoinComm(nranks int, id cuda.UniqueID, rank int) (*Comm, error) {
	if err := d.check("JoinComm"); err != nil {
		return nil, err
	}
	h, err := cuda.NCCLCommInitRank(nranks, id, rank)
	if err != nil {
		return nil, fmt.Errorf("gpu %d: nccl rank %d of %d: %w", d.info.Ordinal, rank, nranks, err)
	}
	// NCCL selects the device through the runtime API; keep the worker's
	// primary context bound whatever it did.
	if err := cuda.CtxSetCurrent(d.ctx); err != nil {
		return nil, err
	}
	c := &Comm{d: d, c: h, rank: rank, size: nranks}
	d.comms = append(d.comms, c)
	return c, nil
}

// NewComms makes one communicator over the given workers, rank i on
// workers[i], each joined from its own worker thread at the same time.
func NewComms(workers []*Worker) ([]*Comm, error) {
	id, err := cuda.NCCLGetUniqueID()
	if err != nil {
		return nil, err
	}
	comms := make([]*Comm, len(workers))
	jobs := make([]*Job, len(workers))
	for i, w := range workers {
		jobs[i] = w.Submit(func(d *Device) error {
			var err error
			comms[i], err = d.JoinComm(len(workers), id, i)
			return err
		})
	}
	var errs []error
	for _, j := range jobs {
		errs = append(errs, j.Wait())
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return comms, nil
}

// AllReduce queues recv = op over all ranks of send (count elements of t)
// on s (the default stream when nil). send and recv may be the same buffer.
func (c *Comm) AllReduce(s *Stream, send, recv Buffer, count int, t dtype.DType, op cuda.NCCLRedOp) error {
	if err := c.d.check("AllReduce"); err != nil {
		return err
	}
	c.fits(send, recv, count, t)
	return c.c.AllReduce(send.Ptr, recv.Ptr, count, cuda.NCCLType(t), op, c.d.stream(s).h)
}

// Broadcast queues copying root's send into every rank's recv on s.
func (c *Comm) Broadcast(s *Stream, send, recv Buffer, count int, t dtype.DType, root int) error {
	if err := c.d.check("Broadcast"); err != nil {
		return err
	}
	c.fits(send, recv, count, t)
	return c.c.Broadcast(send.Ptr, recv.Ptr, count, cuda.NCCLType(t), root, c.d.stream(s).h)
}

func (c *Comm) fits(send, recv Buffer, count int, t dtype.DType) {
	if n := int64(count) * int64(t.Size()); n > send.Size || n > recv.Size {
		panic(fmt.Sprintf("gpu: collective of %d bytes on buffers of %d and %d", n, send.Size, recv.Size))
	}
}

// NCCLGroup issues the collectives that fn queues as one NCCL group (fused
// launches, e.g. one all-reduce per gradient bucket). The group is closed
// even when fn fails.
func (d *Device) NCCLGroup(fn func() error) error {
	if err := d.check("NCCLGroup"); err != nil {
		return err
	}
	if err := cuda.NCCLGroupStart(); err != nil {
		return err
	}
	err := fn()
	return errors.Join(err, cuda.NCCLGroupEnd())
}

// Abort frees the communicator without waiting for its queued
// collectives, which then fail: the way out of one that a lost rank never
// completes. Destroy afterwards does nothing.
func (c *Comm) Abort() error { return c.free("Comm.Abort", cuda.Comm.Abort) }

// AsyncError returns the error a collective of c met in the background
// (a peer that left, a network failure), or nil; nil after Abort.
func (c *Comm) AsyncError() error {
	if c.c == 0 {
		return nil
	}
	return c.c.AsyncError()
}

// Destroy frees the communicator.
func (c *Comm) Destroy() error { return c.free("Comm.Destroy", cuda.Comm.Destroy) }

// free frees the communicator with how (Destroy or Abort), once: a freed
// one is left alone.
func (c *Comm) free(op string, how func(cuda.Comm) error) error {
	if err := c.d.check(op); err != nil {
		return err
	}
	if c.c == 0 {
		return nil
	}
	err := how(c.c)
	c.c = 0
	return err
}
