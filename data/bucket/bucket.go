// Package bucket groups samples of similar length into fixed-shape batches
// for training.
//
// Every bucket length is a multiple of Edge, the attention block (default
// 128), so a worker can keep one captured CUDA graph per bucket. By default
// a sample of length L goes to the bucket of length ceil(L/Edge)*Edge, one
// bucket per multiple that some sample needs; with MaxBuckets = n the bucket
// lengths are the n multiples (the largest covering the longest sample)
// that pad the data set least (ChooseLens), and a sample goes to the
// shortest bucket that holds it. A batch holds samples of one bucket only,
// as many as fit in the token budget: floor(Budget / bucket length), at
// least one, at most MaxBatch when set; with PadRows every batch of a bucket
// has that many rows, a short last batch padded with empty rows, so that all
// batches of a bucket have one shape. Each epoch, the samples of every
// bucket are shuffled, cut into batches, and the batches of all buckets are
// shuffled together, all from a PCG generator seeded with (Seed,
// Stream<<32 | epoch): the order is a pure function of the lengths, the
// Config and the epoch. A Sampler's position is a small State that can be
// saved with a checkpoint and restored.
//
// `dflash data stats` prints Report; `dflash train --data.buckets N` draws
// its training batches from a Sampler (model/dflash's Session), so that its
// steps run on a bounded set of shapes (one captured graph per bucket on the
// GPU). Batches of a fixed size without length grouping, the trainer's
// default, are data/order's Order.
package bucket

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// DefaultEdge is the default bucket granularity: the attention block.
const DefaultEdge = 128

// Config sets how batches are formed.
type Config struct {
	Edge        int    // bucket lengths are multiples of Edge (default DefaultEdge)
	TokenBudget int    // padded tokens per batch: batch size x bucket length <= TokenBudget
	MaxBatch    int    // at most this many samples per batch (0: no limit)
	Seed        uint64 // shuffling seed
	Stream      uint64 // random stream of the seed (trainers pass rngstream.Data)
	DropLast    bool   // drop each bucket's last, partly filled batch
	// MaxBuckets, when positive, bounds the number of bucket lengths: they
	// are chosen by ChooseLens to pad the data set least. 0: one bucket per
	// multiple of Edge that a sample needs.
	MaxBuckets int
	// PadRows gives every batch of a bucket BatchSize(Len) rows: a short
	// batch is padded with empty rows (Batch.Rows > len(Batch.Indices)).
	PadRows bool
}

// Batch is one training batch.
type Batch struct {
	Indices []int // sample indices
	Len     int   // padded length: the bucket length
	// Rows is the number of rows of the batch: len(Indices), or the
	// bucket's BatchSize with PadRows (the rows past len(Indices) empty).
	Rows int
}

// State is the position of a Sampler: the next batch is batch Batch of
// epoch Epoch. Seed, Samples and Buckets (the bucket lengths) guard against
// restoring into another run.
type State struct {
	Epoch   int    `json:"epoch"`
	Batch   int    `json:"batch"`
	Seed    uint64 `json:"seed"`
	Samples int    `json:"samples"`
	Buckets []int  `json:"buckets"`
}

// Sampler hands out batches epoch after epoch.
type Sampler struct {
	cfg     Config
	lengths []int
	lens    []int         // bucket lengths, ascending
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
	if cfg.MaxBuckets < 0 {
		return nil, fmt.Errorf("bucket: number of buckets must not be negative, got %d", cfg.MaxBuckets)
	}
	if len(lengths) == 0 {
		return nil, fmt.Errorf("bucket: no samples")
	}
	s := &Sampler{cfg: cfg, lengths: lengths, members: map[int][]int{}}
	var err error
	if cfg.MaxBuckets > 0 {
		s.lens, err = ChooseLens(lengths, cfg.Edge, cfg.MaxBuckets)
	} else {
		s.lens, _, err = histogram(lengths, cfg.Edge)
	}
	if err != nil {
		return nil, err
	}
	for i, l := range lengths {
		b := s.BucketLen(l)
		if b > cfg.TokenBudget {
			return nil, fmt.Errorf("bucket: sample %d has %d tokens, %d padded, over the token budget %d", i, l, b, cfg.TokenBudget)
		}
		s.members[b] = append(s.members[b], i)
	}
	s.plan = s.Plan(0)
	return s, nil
}

// BucketLen is the padded length of a sample of length l: the shortest
// bucket that holds it (l rounded up to Edge when l is past every bucket).
func (s *Sampler) BucketLen(l int) int {
	i, _ := slices.BinarySearch(s.lens, l)
	if i == len(s.lens) {
		return RoundUp(l, s.cfg.Edge)
	}
	return s.lens[i]
}

// Lens returns the bucket lengths, ascending.
func (s *Sampler) Lens() []int { return slices.Clone(s.lens) }

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
	rng := rand.New(rand.NewPCG(s.cfg.Seed, s.cfg.Stream<<32|uint64(epoch)))
	var plan []Batch
	for _, b := range s.lens {
		idx := append([]int(nil), s.members[b]...)
		rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		n := s.BatchSize(b)
		for k := 0; k < len(idx); k += n {
			end := min(k+n, len(idx))
			if end-k < n && s.cfg.DropLast {
				break
			}
			rows := end - k
			if s.cfg.PadRows {
				rows = n
			}
			plan = append(plan, Batch{Indices: idx[k:end:end], Len: b, Rows: rows})
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
	return State{Epoch: s.epoch, Batch: s.pos, Seed: s.cfg.Seed, Samples: len(s.lengths), Buckets: s.Lens()}
}

// Restore moves to a saved position.
func (s *Sampler) Restore(st State) error {
	if st.Seed != s.cfg.Seed || st.Samples != len(s.lengths) {
		return fmt.Errorf("bucket: state is for seed %d over %d samples, this sampler has seed %d over %d",
			st.Seed, st.Samples, s.cfg.Seed, len(s.lengths))
	}
	if !slices.Equal(st.Buckets, s.lens) {
		return fmt.Errorf("bucket: state is for buckets %v, this sampler has buckets %v", st.Buckets, s.lens)
	}
	if st.Epoch < 0 || st.Batch < 0 || st.Batch > len(s.plan) {
		return fmt.Errorf("bucket: state batch %d outside an epoch of %d batches", st.Batch, len(s.plan))
	}
	s.epoch, s.pos = st.Epoch, st.Batch
	s.plan = s.Plan(st.Epoch)
	return nil
}
