// Package order is the epoch order of training samples in batches of a fixed
// size: a pure function of (seed, stream, epoch), with a position that a
// checkpoint saves and a resumed run restores. (Batches grouped by length,
// for fixed-shape GPU steps, are data/bucket's Sampler.)
package order

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// Order hands out batches of indices 0..n−1 epoch after epoch: each epoch
// is a permutation drawn from a PCG seeded with (seed, stream<<32 | epoch),
// cut into consecutive batches; a batch that would run past the end starts
// the next epoch instead. The position is a small JSON state (State,
// Restore) saved with a checkpoint, so that a resumed run sees the same
// batches.
//
// For data-parallel training the batch is the global batch and each rank
// takes its share of it (Shard): the order and the position are those of
// the global batches, the same on every rank, so a run on R ranks of
// batch b sees what one rank of batch R*b sees, and a checkpoint resumes on
// any number of ranks at the same place in the global order.
type Order struct {
	n, batch     int
	rank, ranks  int
	seed, stream uint64
	epoch        int
	pos          int
	perm         []int // nil until the first batch of an epoch
}

// New returns the order of n items in batches of batch (at most n), drawn
// from the random stream (seed, stream); trainers pass rngstream.Data.
func New(n, batch int, seed, stream uint64) *Order {
	return &Order{n: n, batch: batch, seed: seed, stream: stream, ranks: 1}
}

// Shard makes Next return rank's share of each global batch of k items
// (0 <= rank < ranks): items [rank*k/ranks, (rank+1)*k/ranks) of it, all
// shares of one size when ranks divides k. It returns o.
func (o *Order) Shard(rank, ranks int) *Order {
	if ranks < 1 || rank < 0 || rank >= ranks {
		panic(fmt.Sprintf("order: rank %d of %d", rank, ranks))
	}
	o.rank, o.ranks = rank, ranks
	return o
}

func (o *Order) shuffle() {
	o.perm = make([]int, o.n) // a fresh slice: batches handed out earlier stay valid
	for i := range o.perm {
		o.perm[i] = i
	}
	rng := rand.New(rand.NewPCG(o.seed, o.stream<<32|uint64(o.epoch)))
	rng.Shuffle(o.n, func(i, j int) { o.perm[i], o.perm[j] = o.perm[j], o.perm[i] })
}

// Next returns the indices of the next batch (this rank's share of it).
func (o *Order) Next() []int {
	if o.perm == nil {
		o.shuffle()
	}
	k := min(o.batch, o.n)
	if o.pos+k > o.n {
		o.epoch++
		o.pos = 0
		o.shuffle()
	}
	idx := o.perm[o.pos+o.rank*k/o.ranks : o.pos+(o.rank+1)*k/o.ranks]
	o.pos += k
	return idx
}

type orderState struct {
	Epoch int `json:"epoch"`
	Pos   int `json:"pos"`
}

// State returns the position as JSON: {"epoch": E, "pos": P}.
func (o *Order) State() (json.RawMessage, error) { return json.Marshal(orderState{o.epoch, o.pos}) }

// Restore moves to a position returned by State.
func (o *Order) Restore(raw json.RawMessage) error {
	var st orderState
	if err := json.Unmarshal(raw, &st); err != nil {
		return err
	}
	o.epoch, o.pos = st.Epoch, st.Pos
	o.shuffle()
	return nil
}
