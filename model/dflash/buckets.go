package dflash

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"

	"dflash/data/bucket"
	"dflash/internal/rngstream"
)

// Fixed-shape training batches (Session.Buckets > 0). The training examples
// are grouped into at most Buckets length buckets, each a multiple of the
// attention block (bucket.DefaultEdge), chosen from the length histogram to
// pad least (bucket.ChooseLens). Every batch of a bucket has one shape:
//
//	rows    BatchSize (a bucket's short last batch: empty pad rows, length 0, mask 0)
//	length  the bucket's length
//	blocks  min(NumAnchors, length−1) anchor blocks per row, the unused ones dead
//
// so a worker can capture one graph per bucket. Rows stay at BatchSize in
// every bucket (bucket.Config.MaxBatch; its token budget, BatchSize × the
// longest bucket, never binds): each row carries up to NumAnchors anchor
// blocks whatever its length, so more rows in short buckets would multiply
// the drafter's work and memory per step; the longest bucket is the largest
// step, as with batches padded to their longest.

// shape fixes a batch's rows, padded length and anchor blocks per row, and
// whether its rows are packed; the zero shape lets the batch take its
// examples' own.
type shape struct {
	rows, len, blocks int
	packed            bool
}

// trainSampler returns the bucket sampler of the training examples, made on
// first use.
func (s *Session) trainSampler() (*bucket.Sampler, error) {
	if s.sampler != nil {
		return s.sampler, nil
	}
	if s.Ranks != nil && s.Ranks.Size() > 1 {
		return nil, fmt.Errorf("training batches: length buckets with %d ranks: not yet (the bucket sampler is not sharded across ranks)", s.Ranks.Size())
	}
	lengths := make([]int, len(s.Train))
	longest := 1
	for i, e := range s.Train {
		lengths[i] = len(e.IDs)
		longest = max(longest, len(e.IDs))
	}
	sp, err := bucket.New(lengths, bucket.Config{Edge: bucket.DefaultEdge, MaxBuckets: s.Buckets, PadRows: true,
		TokenBudget: s.BatchSize * bucket.RoundUp(longest, bucket.DefaultEdge), MaxBatch: s.BatchSize,
		Seed: s.Seed, Stream: rngstream.Data})
	if err != nil {
		return nil, fmt.Errorf("training batches: %w", err)
	}
	s.sampler = sp
	return sp, nil
}

// BucketReport returns the padding of an epoch of the training batches in
// buckets (nil when Buckets is 0).
func (s *Session) BucketReport() (*bucket.Report, error) {
	if s.Buckets <= 0 {
		return nil, nil
	}
	sp, err := s.trainSampler()
	if err != nil {
		return nil, err
	}
	r := sp.Report()
	return &r, nil
}

// BucketSteps returns the training batches this session drew from each
// length bucket, by bucket length (nil without buckets).
func (s *Session) BucketSteps() map[int]int { return maps.Clone(s.bucketSteps) }

// countReplays adds what tensor.Backend.Replay did for b's regions to
// the session's counts, by bucket length.
func (s *Session) countReplays(b *Batch) {
	if len(b.Replays) == 0 {
		return
	}
	if s.replays == nil {
		s.replays = map[int]map[string]int{}
	}
	if s.replays[b.Len] == nil {
		s.replays[b.Len] = map[string]int{}
	}
	for _, k := range b.Replays {
		s.replays[b.Len][k]++
	}
}

// Replays returns, by bucket length, how many times the training passes
// of its batches ran eagerly, were captured into a CUDA graph, launched
// one, were captured again or ran without one (tensor.Backend.Replay's
// kinds; two regions a step, the target's and the drafter's). It is empty
// without buckets or on a backend that does not replay.
func (s *Session) Replays() map[int]map[string]int {
	out := map[int]map[string]int{}
	for l, m := range s.replays {
		out[l] = maps.Clone(m)
	}
	return out
}

// ReplayTotals returns the session's captures (first and again) and graph
// launches so far, over every bucket.
func (s *Session) ReplayTotals() (captures, launches int) {
	for _, m := range s.replays {
		captures += m["captured"] + m["recaptured"]
		launches += m["captured"] + m["recaptured"] + m["launched"]
	}
	return captures, launches
}

// nextTrain returns the inputs of the next training batch: packed, from
// the data order, or from the bucket sampler in its bucket's shape.
func (s *Session) nextTrain(rng *rand.Rand) (*StepInputs[float32], error) {
	n := s.Drafter.Cfg.NumAnchors
	if s.Pack != nil {
		p, err := s.packer()
		if err != nil {
			return nil, err
		}
		return s.inputs(s.Train, p.Next().Rows, training, s.packShape(), n, rng)
	}
	if s.Buckets <= 0 {
		return s.inputs(s.Train, singles(s.trainOrder().Next()), training, shape{}, n, rng)
	}
	sp, err := s.trainSampler()
	if err != nil {
		return nil, err
	}
	b := sp.Next()
	if s.bucketSteps == nil {
		s.bucketSteps = map[int]int{}
	}
	s.bucketSteps[b.Len]++
	sh := shape{rows: b.Rows, len: b.Len, blocks: max(1, min(n, b.Len-1))}
	return s.inputs(s.Train, singles(b.Indices), training, sh, n, rng)
}

// DataState returns the position of the training data: the packer's, the
// data order's, or the bucket sampler's State (what a checkpoint keeps).
func (s *Session) DataState() (json.RawMessage, error) {
	if s.Pack != nil {
		p, err := s.packer()
		if err != nil {
			return nil, err
		}
		return json.Marshal(p.State())
	}
	if s.Buckets <= 0 {
		return s.trainOrder().State()
	}
	sp, err := s.trainSampler()
	if err != nil {
		return nil, err
	}
	return json.Marshal(sp.State())
}

// RestoreData restores a position DataState returned. A position of packed
// batches (it names the row length) or of batches in buckets (it lists
// them) restores only into a session of the same kind of batches.
func (s *Session) RestoreData(raw json.RawMessage) error {
	var probe struct {
		Buckets []int `json:"buckets"`
		RowLen  int   `json:"row_len"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return fmt.Errorf("data position %s: %w", raw, err)
	}
	if (probe.RowLen > 0) != (s.Pack != nil) {
		kinds := map[bool]string{true: "packed", false: "not packed"}
		return fmt.Errorf("the data position is of batches %s; this run's are %s", kinds[probe.RowLen > 0], kinds[s.Pack != nil])
	}
	if s.Pack != nil {
		p, err := s.packer()
		if err != nil {
			return err
		}
		return restoreState(raw, p.Restore)
	}
	if s.Buckets <= 0 {
		if probe.Buckets != nil {
			return fmt.Errorf("the data position is of batches in length buckets %v; this run has no buckets", probe.Buckets)
		}
		return s.trainOrder().Restore(raw)
	}
	if probe.Buckets == nil {
		return fmt.Errorf("the data position is of batches without length buckets; this run has buckets")
	}
	sp, err := s.trainSampler()
	if err != nil {
		return err
	}
	return restoreState(raw, sp.Restore)
}

// restoreState decodes raw, a position of DataState, into a State of its
// kind and gives it to restore.
func restoreState[S any](raw json.RawMessage, restore func(S) error) error {
	var st S
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("data position %s: %w", raw, err)
	}
	return restore(st)
}
