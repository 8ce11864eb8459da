package traincuda

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/jit"
	"dflash/rendezvous"
	"dflash/tensor/tensorcuda"
	"dflash/train"
)

// CommKind is how the ranks of a Placement get their communicator.
type CommKind int

const (
	// NoComm: a job of one rank makes no collective call.
	NoComm CommKind = iota
	// LocalComm: every rank is in this process (gpu.NewComms).
	LocalComm
	// RendezvousComm: one rank per process; rank 0 hands out the NCCL id
	// over TCP (rendezvous.Exchange) and each process joins (gpu.JoinComm).
	RendezvousComm
)

// Placement is the ranks of a data-parallel job that this process runs:
// rank Ranks[i] on GPU GPUs[i], among World ranks.
type Placement struct {
	Ranks []int
	GPUs  []int
	World int
	Comm  CommKind
	Addr  string // the rendezvous address (RendezvousComm)
}

// PlaceRanks places the ranks of this process: with a launch of one
// process, one rank per GPU of gpus (nil: GPU 0 alone); in a job of
// several processes (l.WorldSize > 1), rank l.Rank alone on GPU
// l.LocalRank, and then gpus must be nil (one GPU per process). gpusFlag
// names the GPU list in errors.
func PlaceRanks(gpus []int, l rendezvous.Launch, gpusFlag string) (Placement, error) {
	if l.WorldSize > 1 {
		if gpus != nil {
			return Placement{}, fmt.Errorf("%s %v with a world of %d processes: each process drives one GPU, its local rank (LOCAL_RANK, else the rank); leave %s out",
				gpusFlag, gpus, l.WorldSize, gpusFlag)
		}
		return Placement{Ranks: []int{l.Rank}, GPUs: []int{l.LocalRank}, World: l.WorldSize, Comm: RendezvousComm, Addr: l.Addr}, nil
	}
	if len(gpus) == 0 {
		gpus = []int{0}
	}
	p := Placement{GPUs: slices.Clone(gpus), World: len(gpus), Comm: LocalComm}
	for i := range gpus {
		p.Ranks = append(p.Ranks, i)
	}
	if p.World == 1 {
		p.Comm = NoComm
	}
	return p, nil
}

// Lead reports whether this process runs rank 0 (it writes the outputs).
func (p Placement) Lead() bool { return slices.Contains(p.Ranks, 0) }

// RankEnv is one rank's share of a job, handed to its function on the
// worker thread of its GPU.
type RankEnv struct {
	Rank, World int
	Device      *gpu.Device
	Backend     *tensorcuda.Backend
	// Collective is the rank's NCCLCollective; nil in a job of one rank.
	Collective train.Collective
}

// RunRanks runs fn for every rank of p at once, each on the worker thread
// of its GPU with its own Backend (kernels through cache) and, for several
// ranks, its NCCLCollective (collective timeout: train.
// DefaultCollectiveTimeout when 0). When a rank's fn fails, the
// collectives of the process's other ranks abort at once (Stop). It
// returns the ranks' errors, the failing rank's first; the caller closes
// the workers (gpu.CloseAll).
func RunRanks(ctx context.Context, cache *jit.Cache, p Placement, timeout time.Duration, fn func(RankEnv) error) error {
	workers := make([]*gpu.Worker, len(p.GPUs))
	for i, g := range p.GPUs {
		var err error
		if workers[i], err = gpu.Open(g); err != nil {
			return err
		}
	}
	comms, err := makeComms(ctx, p, workers)
	if err != nil {
		return err
	}
	stop := NewStop()
	jobs := make([]*gpu.Job, len(workers))
	for i, w := range workers {
		rank := p.Ranks[i]
		jobs[i] = w.Submit(func(d *gpu.Device) (err error) {
			defer func() {
				if r := recover(); r != nil {
					stop.Fail(rank, fmt.Errorf("panic: %v", r))
					panic(r)
				}
				if err != nil {
					stop.Fail(rank, err)
				}
			}()
			defer tensorcuda.RecoverOOM(&err)
			b, err := tensorcuda.NewBackend(cache, d)
			if err != nil {
				return err
			}
			defer b.Close()
			env := RankEnv{Rank: rank, World: p.World, Device: d, Backend: b}
			if comms == nil {
				return fn(env)
			}
			returned := false // false while panicking
			defer func() { err = errors.Join(err, closeComm(comms[i], stop, !returned || err != nil)) }()
			coll, err := NewNCCLCollective(b, comms[i], timeout, stop)
			if err != nil {
				returned = true
				return err
			}
			defer coll.Close()
			env.Collective = coll
			err = fn(env)
			returned = true
			return err
		})
	}
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		if errs[i] = j.Wait(); errs[i] != nil {
			errs[i] = fmt.Errorf("rank %d (GPU %d): %w", p.Ranks[i], p.GPUs[i], errs[i])
		}
	}
	// The cause first: a rank's own failure before the others' lost collectives.
	slices.SortStableFunc(errs, func(a, b error) int {
		return boolInt(errors.Is(a, train.ErrRankLost)) - boolInt(errors.Is(b, train.ErrRankLost))
	})
	return errors.Join(errs...)
}

// closeComm frees a rank's communicator on its worker, all ranks at once
// (rather than one after another as the workers close): destroyed when the
// job went well everywhere, aborted (without waiting for the peers) when
// this rank failed or another stopped.
func closeComm(c *gpu.Comm, stop *Stop, failed bool) error {
	select {
	case <-stop.done():
		failed = true
	default:
	}
	if failed {
		return c.Abort()
	}
	return c.Destroy()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// makeComms returns the communicator of each rank of p (nil for NoComm).
func makeComms(ctx context.Context, p Placement, workers []*gpu.Worker) ([]*gpu.Comm, error) {
	switch p.Comm {
	case NoComm:
		return nil, nil
	case LocalComm:
		comms, err := gpu.NewComms(workers)
		if err != nil {
			return nil, fmt.Errorf("nccl communicator over GPUs %v: %w", p.GPUs, err)
		}
		return comms, nil
	}
	rank := p.Ranks[0]
	id, err := rendezvous.Exchange(ctx, rendezvous.Config{Addr: p.Addr, Rank: rank, NRanks: p.World},
		func() (rendezvous.UniqueID, error) { return cuda.NCCLGetUniqueID() })
	if err != nil {
		return nil, err
	}
	var c *gpu.Comm
	err = workers[0].Run(func(d *gpu.Device) error {
		var err error
		c, err = d.JoinComm(p.World, id, rank)
		return err
	})
	return []*gpu.Comm{c}, err
}

// RunOne runs fn on the worker thread of GPU ordinal with its CUDA backend
// (RunRanks of one rank, no collective), kernels through the process's
// kernel cache in jit's default directory, and closes every GPU of the
// process afterwards: the placement of `dflash spec --device cuda` and
// `dflash demo --device cuda`. Errors start with "--device cuda".
func RunOne(ctx context.Context, ordinal int, gpuFlag string, fn func(RankEnv) error) error {
	dir, _, err := jit.DefaultDir()
	if err != nil {
		return err
	}
	cache, err := jit.NewNVRTCCache(dir)
	if err != nil {
		return fmt.Errorf("--device cuda: %w", err)
	}
	defer gpu.CloseAll()
	place, err := PlaceRanks([]int{ordinal}, rendezvous.Launch{}, gpuFlag)
	if err != nil {
		return err
	}
	if err := RunRanks(ctx, cache, place, 0, fn); err != nil {
		return fmt.Errorf("--device cuda: %w", err)
	}
	return nil
}
