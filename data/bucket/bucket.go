// Package bucket groups samples of similar length into fixed-shape batches
// for training.
//
// A sample of length L goes to the bucket of length ceil(L/Edge)*Edge, where
// Edge is the attention block (default 128), so every bucket length is a
// multiple of the block and a worker can keep one captured CUDA graph per
// bucket. A batch holds samples of one bucket only, as many as fit in the
// token budget: floor(Budget / bucket length), at least one, at most
// MaxBatch when set. Each epoch, the samples of every bucket are shuffled,
// cut into batches, and the batches of all buckets are shuffled together,
// all from a PCG generator seeded with (Seed, epoch): the order is a pure
// function of the lengths, the Config and the epoch. A Sampler's position is
// a small State that can be saved with a checkpoint and restored.
//
// Today `dflash data stats` uses Report; the Sampler's Next, State, Restore
// and DropLast are kept for GPU training, whose steps run on fixed shapes
// (one captured graph per bucket). Batches of a fixed size without length
// grouping, for the CPU trainer, are data/order's Order.
package bucket

import (
	"fmt"
	"math/rand/v2"
	"sort"
)

// DefaultEdge is the default bucket granularity: the attention block.
const DefaultEdge = 128

// Config sets how batches are formed.
type Config struct {
	Edge        int    // bucket lengths are multiples of Edge (default DefaultEdge)
	TokenBudget int    // padded tokens per batch: batch size x bucket length <= TokenBudget
	MaxBatch    int    // at most this many samples per batch (0: no limit)
	Seed        uint64 // shuffling seed
	DropLast    bool   // drop each bucket's last, partly filled batch
}

// Batch is one training batch.
type Batch struct {
	Indices []int // sample indices
	Len     int   // padded length: the bucket length
}

// State is the position of a Sampler: the next batch is batch Batch of
// epoch Epoch. Seed and Samples guard against restoring into another run.
type State struct {
	Epoch   int    `json:"epoch"`
	Batch   int    `json:"batch"`
	Seed    uint64 `json:"seed"`
	Samples int    `json:"samples"`
}

// Sampler hands out batches epoch after epoch.
type Sampler struct {
	cfg     Config
	lengths []int
	edges   []int         // bucket lengths, ascending
	members map[int][]int // bucket length -> sample indices, ascending
	epoch   int
	plan    []Batch // batches of epoch
	pos     int
}

// New builds a Sampler over samples with the given lengths. A sample longer
// than the budget allows is an error naming it.
func New(lengths []int, cfg Config) (*Sampler, error) {
	if cfg.Edge <= 0 {
		cfg.Edge = DefaultEdge
	}
	if cfg.TokenBudget <= 0 {
		return nil, fmt.Errorf("bucket: token budget must be positive, got %d", cfg.TokenBudget)
	}
	if len(lengths) == 0 {
		return nil, fmt.Errorf("bucket: no samples")
	}
	s := &Sampler{cfg: cfg, lengths: lengths, members: map[int][]int{}}
	for i, l := range lengths {
		if l <= 0 {
			return nil, fmt.Errorf("bucket: sample %d has length %d", i, l)
		}
		b := s.BucketLen(l)
		if b > cfg.TokenBudget {
			return nil, fmt.Errorf("bucket: sample %d has %d tokens, %d padded, over the token budget %d", i, l, b, cfg.TokenBudget)
		}
		if _, ok := s.members[b]; !ok {
			s.edges = append(s.edges, b)
		}
		s.members[b] = append(s.members[b], i)
	}
	sort.Ints(s.edges)
	s.plan = s.Plan(0)
	return s, nil
}

// BucketLen is the padded length of a sample of length l.
func (s *Sampler) BucketLen(l int) int { return (l + s.cfg.Edge - 1) / s.cfg.Edge * s.cfg.Edge }

// BatchSize is the number of samples per batch in the bucket of length b.
func (s *Sampler) BatchSize(b int) int {
	n := max(1, s.cfg.TokenBudget/b)
	if s.cfg.MaxBatch > 0 {
		n = min(n, s.cfg.MaxBatch)
	}
	return n
}

// Plan returns every batch of an epoch, in order.
func (s *Sampler) Plan(epoch int) []Batch {
	rng := rand.New(rand.NewPCG(s.cfg.Seed, uint64(epoch)))
	var plan []Batch
	for _, b := range s.edges {
		idx := append([]int(nil), s.members[b]...)
		rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		n := s.BatchSize(b)
		for k := 0; k < len(idx); k += n {
			end := min(k+n, len(idx))
			if end-k < n && s.cfg.DropLast {
				break
			}
			plan = append(plan, Batch{Indices: idx[k:end:end], Len: b})
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	return plan
}

// BatchesPerEpoch is the number of batches in every epoch.
func (s *Sampler) BatchesPerEpoch() int { return len(s.plan) }

// Next returns the next batch, moving to the next epoch after the last.
func (s *Sampler) Next() Batch {
	if len(s.plan) == 0 {
		panic("bucket: every batch is dropped (DropLast with buckets smaller than a batch)")
	}
	if s.pos == len(s.plan) {
		s.epoch++
		s.plan, s.pos = s.Plan(s.epoch), 0
	}
	b := s.plan[s.pos]
	s.pos++
	return b
}

// State returns the position: Restore(State()) continues with the same
// batches.
func (s *Sampler) State() State {
	return State{Epoch: s.epoch, Batch: s.pos, Seed: s.cfg.Seed, Samples: len(s.lengths)}
}

// Restore moves to a saved position.
func (s *Sampler) Restore(st State) error {
	if st.Seed != s.cfg.Seed || st.Samples != len(s.lengths) {
		return fmt.Errorf("bucket: state is for seed %d over %d samples, this sampler has seed %d over %d",
			st.Seed, st.Samples, s.cfg.Seed, len(s.lengths))
	}
	if st.Epoch < 0 || st.Batch < 0 || st.Batch > len(s.plan) {
		return fmt.Errorf("bucket: state batch %d outside an epoch of %d batches", st.Batch, len(s.plan))
	}
	s.epoch, s.pos = st.Epoch, st.Batch
	s.plan = s.Plan(st.Epoch)
	return nil
}
