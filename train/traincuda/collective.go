package traincuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/tensor"
	"dflash/tensor/tensorcuda"
	"dflash/train"
)

// NCCLCollective is train.Collective over one rank of an NCCL
// communicator (design contract 9), on the worker thread of the rank's
// GPU: AllReduceSum sums ranges of the fp32 flat gradient of a Device (its
// GradRange) in place, AllReduceFloat64 sums host values
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
	port    commPort
	timeout time.Duration
	stop    *Stop
	clk     clock
	f64     gpu.Buffer // for AllReduceFloat64, until Close
	seq     int        // collectives started
	err     error      // set once the group broke
}

var _ train.Collective = (*NCCLCollective)(nil)

// commPort is what NCCLCollective needs of a communicator and its device:
// gpu.Comm with an event and the rank's backend on the worker, or a fake in
// the CPU tests.
type commPort interface {
	rank() int
	size() int
	// memory returns the device memory of x, fp32 storage of the rank's
	// backend.
	memory(x train.Buffer) (gpu.Buffer, error)
	// alloc returns n bytes of device memory, free gives them back;
	// upload and download copy between it and the host (upload queued on
	// the default stream, download waiting for it).
	alloc(n int64) (gpu.Buffer, error)
	free(b gpu.Buffer)
	upload(dst gpu.Buffer, src []byte) error
	download(dst []byte, src gpu.Buffer) error
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
func NewNCCLCollective(b *tensorcuda.Backend, comm *gpu.Comm, timeout time.Duration, stop *Stop) (*NCCLCollective, error) {
	d := b.Device()
	if d == nil {
		return nil, errors.New("traincuda: NCCLCollective needs a backend on a GPU")
	}
	ev, err := d.NewEvent()
	if err != nil {
		return nil, err
	}
	return newNCCLCollective(gpuPort{b: b, c: comm, ev: ev}, timeout, stop, realClock{})
}

func newNCCLCollective(port commPort, timeout time.Duration, stop *Stop, clk clock) (*NCCLCollective, error) {
	if timeout <= 0 {
		timeout = train.DefaultCollectiveTimeout
	}
	f64, err := port.alloc(8 * f64Capacity)
	if err != nil {
		return nil, fmt.Errorf("collective: rank %d: %w", port.rank(), err)
	}
	return &NCCLCollective{port: port, timeout: timeout, stop: stop, clk: clk, f64: f64}, nil
}

// Close frees the collective's device memory; the communicator is the
// caller's to destroy.
func (c *NCCLCollective) Close() {
	c.port.free(c.f64)
	c.f64 = gpu.Buffer{}
}

// Rank returns this rank.
func (c *NCCLCollective) Rank() int { return c.port.rank() }

// Size returns the number of ranks.
func (c *NCCLCollective) Size() int { return c.port.size() }

// AllReduceSum replaces x, fp32 storage of c's backend (a Device's
// GradRange), by its sum over the ranks.
func (c *NCCLCollective) AllReduceSum(x train.Buffer) error {
	buf, err := c.port.memory(x)
	if err != nil {
		return fmt.Errorf("collective: rank %d: all-reduce: %w", c.Rank(), err)
	}
	return c.run("all-reduce", buf, x.Len(), dtype.F32)
}

// AllReduceFloat64 replaces the host values x by their sum over the ranks.
func (c *NCCLCollective) AllReduceFloat64(x []float64) error {
	if c.err != nil {
		return c.err
	}
	if need := int64(8 * len(x)); need > c.f64.Size {
		buf, err := c.port.alloc(need)
		if err != nil {
			return fmt.Errorf("collective: rank %d: all-reduce (float64): %w", c.Rank(), err)
		}
		c.port.free(c.f64)
		c.f64 = buf
	}
	raw := make([]byte, 8*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(v))
	}
	buf := gpu.Buffer{Ptr: c.f64.Ptr, Size: int64(len(raw))}
	if err := c.port.upload(buf, raw); err != nil {
		return fmt.Errorf("collective: rank %d: all-reduce (float64): %w", c.Rank(), err)
	}
	if err := c.run("all-reduce (float64)", buf, len(x), dtype.F64); err != nil {
		return err
	}
	if err := c.port.download(raw, buf); err != nil {
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

// gpuPort is commPort on a gpu.Comm and the rank's backend b, with ev
// marking completion.
type gpuPort struct {
	b  *tensorcuda.Backend
	c  *gpu.Comm
	ev *gpu.Event
}

func (p gpuPort) rank() int { return p.c.Rank() }
func (p gpuPort) size() int { return p.c.Size() }
func (p gpuPort) memory(x train.Buffer) (gpu.Buffer, error) {
	s, ok := x.(tensor.Storage[float32])
	if !ok || s.DType() != dtype.F32 {
		return gpu.Buffer{}, fmt.Errorf("want fp32 storage of this rank's backend, not %T %v", x, x)
	}
	return p.b.Memory(s)
}
func (p gpuPort) alloc(n int64) (gpu.Buffer, error) { return p.b.Device().Alloc(n) }
func (p gpuPort) free(b gpu.Buffer) {
	if b.Size > 0 {
		p.b.Device().Free(b)
	}
}
func (p gpuPort) upload(dst gpu.Buffer, src []byte) error { return gpu.Stage(p.b.Device(), dst, src) }
func (p gpuPort) download(dst []byte, src gpu.Buffer) error {
	return gpu.Download(p.b.Device(), dst, src)
}
func (p gpuPort) allReduce(buf gpu.Buffer, n int, t dtype.DType) error {
	return p.c.AllReduce(nil, buf, buf, n, t, cuda.NCCLSum)
}
func (p gpuPort) record() error          { return p.ev.Record(nil) }
func (p gpuPort) reached() (bool, error) { return p.ev.Query() }
func (p gpuPort) asyncError() error      { return p.c.AsyncError() }
func (p gpuPort) abort() error           { return p.c.Abort() }
