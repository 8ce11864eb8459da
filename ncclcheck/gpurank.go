package ncclcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
)

// gpuMem is a device buffer handed out by a GPURank.
type gpuMem struct{ b gpu.Buffer }

func (m gpuMem) Len() int64 { return m.b.Size }

func (m gpuMem) view(off, n int64) gpu.Buffer {
	if off < 0 || n < 0 || off+n > m.b.Size {
		panic(fmt.Sprintf("ncclcheck: %d bytes at offset %d of a %d-byte buffer", n, off, m.b.Size))
	}
	return gpu.Buffer{Ptr: m.b.Ptr + cuda.DevicePtr(off), Size: n}
}

// GPURank is a Rank on a GPU worker's device and an NCCL communicator of
// that device. Its methods must run on the worker's thread (inside
// Worker.Run or a submitted job), like the Device's.
type GPURank struct {
	D    *gpu.Device
	Comm *gpu.Comm
}

// Rank returns the communicator rank.
func (g GPURank) Rank() int { return g.Comm.Rank() }

// NRanks returns the communicator size.
func (g GPURank) NRanks() int { return g.Comm.Size() }

// Alloc takes n bytes from the device's caching allocator.
func (g GPURank) Alloc(n int64) (Mem, error) {
	b, err := g.D.Alloc(n)
	if err != nil {
		return nil, err
	}
	return gpuMem{b}, nil
}

// Free returns m to the allocator.
func (g GPURank) Free(m Mem) { g.D.Free(m.(gpuMem).b) }

// Upload copies src to dst at off and waits for the copy.
func (g GPURank) Upload(dst Mem, off int64, src []byte) error {
	return gpu.Upload(g.D, dst.(gpuMem).view(off, int64(len(src))), src)
}

// Download copies dst's length from src at off and waits for the copy.
func (g GPURank) Download(dst []byte, src Mem, off int64) error {
	return gpu.Download(g.D, dst, src.(gpuMem).view(off, int64(len(dst))))
}

// Memset queues setting every byte of dst to v.
func (g GPURank) Memset(dst Mem, v byte) error { return g.D.Memset(dst.(gpuMem).b, v, nil) }

// Copy queues a device-to-device copy of n bytes.
func (g GPURank) Copy(dst Mem, dstOff int64, src Mem, srcOff, n int64) error {
	return g.D.CopyAsync(dst.(gpuMem).view(dstOff, n), src.(gpuMem).view(srcOff, n), n, nil)
}

// AllReduce queues an NCCL sum all-reduce on the default stream.
func (g GPURank) AllReduce(send, recv Mem, count int, t dtype.DType) error {
	return g.Comm.AllReduce(nil, send.(gpuMem).b, recv.(gpuMem).b, count, t, cuda.NCCLSum)
}

// Time records events around iters calls of op on the default stream and
// returns the time between them.
func (g GPURank) Time(iters int, op func() error) (time.Duration, error) {
	tm, err := g.D.Time(0, 1, func() error {
		for range iters {
			if err := op(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return tm.Samples[0], nil
}

// Sync waits for the device's default stream.
func (g GPURank) Sync() error { return g.D.Synchronize() }

// RunWorkers runs plan on every rank of one communicator whose ranks are
// all in this process: comms[i] belongs to workers[i]. The ranks run at the
// same time, each on its worker's thread.
func RunWorkers(ctx context.Context, workers []*gpu.Worker, comms []*gpu.Comm, plan Plan) ([]*RankResult, error) {
	if len(workers) != len(comms) {
		panic(fmt.Sprintf("ncclcheck: %d workers and %d communicators", len(workers), len(comms)))
	}
	results := make([]*RankResult, len(workers))
	jobs := make([]*gpu.Job, len(workers))
	for i, w := range workers {
		jobs[i] = w.Submit(func(d *gpu.Device) error {
			var err error
			results[i], err = RunRank(ctx, GPURank{D: d, Comm: comms[i]}, plan)
			return err
		})
	}
	var errs []error
	for i, j := range jobs {
		if err := j.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("gpu %d: %w", workers[i].Ordinal(), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return results, nil
}
