package dflash

import (
	"fmt"
	"math"

	"dflash/data/bucket"
	"dflash/data/pack"
	"dflash/internal/rngstream"
)

// Packed batches (Session.Pack): every batch is BatchSize rows of Len
// tokens, each row several samples back to back (package pack packs them
// first-fit decreasing, deterministically from the seed), and Blocks anchor
// blocks a row, so every step has one shape and a worker captures one graph
// for the whole run. Inside a row attention stays in each sample (the
// target's document mask, the blocks' context starts), positions restart
// at each sample, and each sample draws its own anchors, at most the
// drafter's NumAnchors; a row whose samples want more anchors than Blocks
// shares them in proportion (AnchorShares).
//
// The evaluation set is packed once, into rows of the same length; its
// batches have as many blocks a row as its fullest row wants, so that
// evaluation computes no block it does not need and is a shape of its own
// (its drafter pass one more graph; the target's pass is the training
// one's).

// Packing is the shape of packed rows.
type Packing struct {
	Len    int // tokens a row
	Blocks int // anchor blocks a row of a training batch
}

// NewPacking returns the packed rows for the examples: Len is packLen, or
// when 0 the longest example of train and eval rounded up to
// bucket.DefaultEdge; Blocks the anchors Len tokens of the training
// examples want on average (each min(numAnchors, its candidates)), a
// twentieth more, rounded up to 16. It is an error when an example is
// longer than packLen.
func NewPacking(train, eval []Example, numAnchors, packLen int) (Packing, error) {
	longest := 1
	for _, set := range [][]Example{train, eval} {
		for _, e := range set {
			longest = max(longest, len(e.IDs))
		}
	}
	p := Packing{Len: packLen}
	if p.Len == 0 {
		p.Len = bucket.RoundUp(longest, bucket.DefaultEdge)
	}
	if longest > p.Len {
		return p, fmt.Errorf("a sample of %d tokens does not fit a packed row of %d", longest, p.Len)
	}
	var tokens, want float64
	for _, e := range train {
		tokens += float64(len(e.IDs))
		want += float64(e.anchors(numAnchors))
	}
	n := 16
	if tokens > 0 {
		n = int(math.Ceil(float64(p.Len) * want / tokens * 1.05))
	}
	p.Blocks = max(16, (n+15)/16*16)
	return p, nil
}

// anchors returns the anchors e draws at most n of: its candidates, at
// most n (ExampleAnchors).
func (e Example) anchors(n int) int { return min(n, len(Candidates(e.Mask, len(e.IDs)))) }

// packer returns the packer of the training examples, made on first use.
func (s *Session) packer() (*pack.Packer, error) {
	if s.trainPack != nil {
		return s.trainPack, nil
	}
	if s.Buckets > 0 {
		return nil, fmt.Errorf("training batches: packed rows and length buckets exclude each other")
	}
	rank, ranks := 0, 1
	if s.Ranks != nil {
		rank, ranks = s.Ranks.Rank(), s.Ranks.Size()
	}
	p, err := pack.New(lengths(s.Train), pack.Config{RowLen: s.Pack.Len, Rows: s.BatchSize, Ranks: ranks, Rank: rank,
		Seed: s.Seed, Stream: rngstream.Data})
	if err != nil {
		return nil, fmt.Errorf("training batches: %w", err)
	}
	s.trainPack = p
	return p, nil
}

// lengths returns the examples' lengths.
func lengths(set []Example) []int {
	out := make([]int, len(set))
	for i, e := range set {
		out[i] = len(e.IDs)
	}
	return out
}

// packShape returns the shape of a packed training batch.
func (s *Session) packShape() shape {
	return shape{rows: s.BatchSize, len: s.Pack.Len, blocks: s.Pack.Blocks, packed: true}
}

// evalBatches returns the batches of the evaluation set with their shape,
// made on first use (planEval).
func (s *Session) evalBatches() ([][][]int, shape, error) {
	if s.evalPlan != nil || len(s.Eval) == 0 {
		return s.evalPlan, s.evalShape, nil
	}
	plan, err := planEval(s.Eval, s.BatchSize, s.Pack, s.Seed)
	if err != nil {
		return nil, shape{}, err
	}
	s.evalPlan = plan
	if s.Pack == nil {
		return s.evalPlan, shape{}, nil
	}
	n := s.evalAnchors()
	blocks := 1
	for _, b := range s.evalPlan {
		for _, row := range b {
			want := 0
			for _, i := range row {
				want += s.Eval[i].anchors(n)
			}
			blocks = max(blocks, want)
		}
	}
	s.evalShape = shape{rows: s.BatchSize, len: s.Pack.Len, blocks: (blocks + 15) / 16 * 16, packed: true}
	return s.evalPlan, s.evalShape, nil
}

// planEval returns the batches of the evaluation set eval, each its rows'
// examples: with p, packed into rows rows of p.Len tokens (package pack,
// from seed); without, a sample a row in the set's order, rows a batch.
func planEval(eval []Example, rows int, p *Packing, seed uint64) ([][][]int, error) {
	if p == nil {
		var plan [][][]int
		for i := 0; i < len(eval); i += rows {
			var b [][]int
			for j := i; j < min(i+rows, len(eval)); j++ {
				b = append(b, []int{j})
			}
			plan = append(plan, b)
		}
		return plan, nil
	}
	pk, err := pack.New(lengths(eval), pack.Config{RowLen: p.Len, Rows: rows, Seed: seed, Stream: rngstream.Eval})
	if err != nil {
		return nil, fmt.Errorf("evaluation batches: %w", err)
	}
	return pk.Plan(0), nil
}

// evalAnchors returns the anchors a held-out sample draws at most.
func (s *Session) evalAnchors() int {
	if s.EvalAnchors > 0 {
		return min(s.EvalAnchors, s.Drafter.Cfg.NumAnchors)
	}
	return s.Drafter.Cfg.NumAnchors
}

// PackReport is the packing of an epoch of the training batches: the
// packer's Report, and the share of the anchors the samples want that
// their rows have room for (AnchorShares).
type PackReport struct {
	pack.Report
	Blocks      int     `json:"row_blocks"`
	AnchorsKept float64 `json:"anchors_kept"`
	BlockUse    float64 `json:"block_use"`
}

// PackReport returns the packing of the first epoch (nil without Pack).
func (s *Session) PackReport() (*PackReport, error) {
	if s.Pack == nil {
		return nil, nil
	}
	p, err := s.packer()
	if err != nil {
		return nil, err
	}
	r := &PackReport{Report: p.Report(), Blocks: s.Pack.Blocks}
	var want, kept int
	for _, b := range p.Plan(0) {
		for _, row := range b {
			w := make([]int, len(row))
			for k, i := range row {
				w[k] = s.Train[i].anchors(s.Drafter.Cfg.NumAnchors)
				want += w[k]
			}
			for _, n := range AnchorShares(w, s.Pack.Blocks) {
				kept += n
			}
		}
	}
	if want > 0 {
		r.AnchorsKept = float64(kept) / float64(want)
	}
	r.BlockUse = float64(kept) / float64(r.Rows*s.Pack.Blocks)
	return r, nil
}
