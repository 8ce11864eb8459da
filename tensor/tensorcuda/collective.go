package tensorcuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/train"
)

// NCCLCollective is train.Collective over one rank of an NCCL
// communicator (design contract 9), on the worker thread of the rank's
// GPU: AllReduceSum sums ranges of the fp32 flat gradient of a
// TrainDevice (its GradRange) in place, AllReduceFloat64 sums host values
// through a small persistent device buffer. Each call queues the
// all-reduce on the default stream and waits for it under a watchdog:
// past the timeout, on an error NCCL met in the background, or when
// another rank of the process stopped (Stop), it aborts the communicator
// and returns a *LostError (errors.Is train.ErrRankLost); the group is
// then unusable and every later call returns that error.
//
// Waiting at every call keeps each wait under the watchdog (nothing else
// of the step synchronises with the device before it), at the price of a
// host round trip per gradient bucket.
type NCCLCollective struct {
	b       *Backend
	port    commPort
	timeout time.Duration
	stop    *Stop
	clk     clock
	f64     gpu.Buffer // persistent, for AllReduceFloat64
	seq     int        // collectives started
	err     error      // set once the group broke
}

var _ train.Collective = (*NCCLCollective)(nil)

// commPort is what NCCLCollective needs of a communicator and its device:
// gpu.Comm with an event on the worker, or a fake in the CPU tests.
type commPort interface {
	rank() int
	size() int
	// allReduce queues an in-place sum of count elements of t at buf on
	// the default stream.
	allReduce(buf gpu.Buffer, count int, t dtype.DType) error
	// record marks the end of the work queued so far; reached reports,
	// without waiting, whether the device got there.
	record() error
	reached() (bool, error)
	asyncError() error
	abort() error
}

// f64Capacity is the number of float64 values the persistent buffer of
// AllReduceFloat64 holds at first (a step's loss, tokens and metrics).
const f64Capacity = 64

// NewNCCLCollective returns the collective of comm, whose device is b's;
// its calls wait at most timeout (0: train.DefaultCollectiveTimeout) and
// give up at once when stop (optional) fires. Call it on the worker thread.
func NewNCCLCollective(b *Backend, comm *gpu.Comm, timeout time.Duration, stop *Stop) (*NCCLCollective, error) {
	d := b.Device()
	if d == nil {
		return nil, errors.New("tensorcuda: NCCLCollective needs a backend on a GPU")
	}
	ev, err := d.NewEvent()
	if err != nil {
		return nil, err
	}
	return newNCCLCollective(b, gpuPort{c: comm, ev: ev}, timeout, stop, realClock{}), nil
}

func newNCCLCollective(b *Backend, port commPort, timeout time.Duration, stop *Stop, clk clock) *NCCLCollective {
	if timeout <= 0 {
		timeout = train.DefaultCollectiveTimeout
	}
	return &NCCLCollective{b: b, port: port, timeout: timeout, stop: stop, clk: clk,
		f64: b.alloc(8*f64Capacity, true, false)}
}

// Rank returns this rank.
func (c *NCCLCollective) Rank() int { return c.port.rank() }

// Size returns the number of ranks.
func (c *NCCLCollective) Size() int { return c.port.size() }

// AllReduceSum replaces x, fp32 storage of c's backend (a TrainDevice's
// GradRange), by its sum over the ranks.
func (c *NCCLCollective) AllReduceSum(x train.Buffer) error {
	buf, ok := x.(Buf)
	if !ok {
		return fmt.Errorf("collective: rank %d: an NCCLCollective reduces CUDA backend storage (Buf), not %T", c.Rank(), x)
	}
	if buf.be != c.b || buf.dt != dtype.F32 {
		return fmt.Errorf("collective: rank %d: all-reduce of %v: want fp32 storage of this rank's backend", c.Rank(), buf)
	}
	c.b.live("all-reduce buffer", buf.step)
	return c.run("all-reduce", buf.Buffer(), buf.n, dtype.F32)
}

// AllReduceFloat64 replaces the host values x by their sum over the ranks.
func (c *NCCLCollective) AllReduceFloat64(x []float64) error {
	if c.err != nil {
		return c.err
	}
	if need := int64(8 * len(x)); need > c.f64.Size {
		c.f64 = c.b.alloc(need, true, false)
	}
	raw := make([]byte, 8*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(v))
	}
	buf := gpu.Buffer{Ptr: c.f64.Ptr, Size: int64(len(raw))}
	if err := c.b.mem.upload(buf, raw); err != nil {
		return fmt.Errorf("collective: rank %d: all-reduce (float64): %w", c.Rank(), err)
	}
	if err := c.run("all-reduce (float64)", buf, len(x), dtype.F64); err != nil {
		return err
	}
	if err := c.b.mem.download(raw, buf); err != nil {
		return fmt.Errorf("collective: rank %d: all-reduce (float64): %w", c.Rank(), err)
	}
	for i := range x {
		x[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return nil
}

// run queues the all-reduce of op and waits for it under the watchdog.
func (c *NCCLCollective) run(op string, buf gpu.Buffer, n int, t dtype.DType) error {
	if c.err != nil {
		return c.err
	}
	c.seq++
	if n == 0 {
		return nil
	}
	err := c.port.allReduce(buf, n, t)
	if err == nil {
		err = c.port.record()
	}
	if err != nil {
		return c.fail(op, &LostError{Peer: -1, Cause: err})
	}
	how, err := await(c.port.reached, c.port.asyncError, c.stop.done(), c.timeout, c.clk)
	switch how {
	case completed:
		return nil
	case stopped:
		return c.fail(op, &LostError{Peer: c.stop.rank, Cause: c.stop.why})
	case expired:
		return c.fail(op, &LostError{Peer: -1, Timeout: c.timeout})
	default:
		return c.fail(op, &LostError{Peer: -1, Cause: err})
	}
}

// fail aborts the communicator and breaks the group with e, completed
// with this rank and collective.
func (c *NCCLCollective) fail(op string, e *LostError) error {
	e.Rank, e.Size, e.Op, e.Seq = c.Rank(), c.Size(), op, c.seq
	c.err = e
	if err := c.port.abort(); err != nil {
		c.err = fmt.Errorf("%w (abort: %v)", e, err)
	}
	return c.err
}

// gpuPort is commPort on a gpu.Comm, with ev marking completion.
type gpuPort struct {
	c  *gpu.Comm
	ev *gpu.Event
}

func (p gpuPort) rank() int { return p.c.Rank() }
func (p gpuPort) size() int { return p.c.Size() }
func (p gpuPort) allReduce(buf gpu.Buffer, n int, t dtype.DType) error {
	return p.c.AllReduce(nil, buf, buf, n, t, cuda.NCCLSum)
}
func (p gpuPort) record() error          { return p.ev.Record(nil) }
func (p gpuPort) reached() (bool, error) { return p.ev.Query() }
func (p gpuPort) asyncError() error      { return p.c.AsyncError() }
func (p gpuPort) abort() error           { return p.c.Abort() }

// GradRange returns elements [lo, hi) of the flat fp32 gradient
// (train.GradRanger), for NCCLCollective.
func (t *TrainDevice) GradRange(lo, hi int) train.Buffer { return t.grad.Slice(lo, hi).(Buf) }

var _ train.GradRanger = (*TrainDevice)(nil)
