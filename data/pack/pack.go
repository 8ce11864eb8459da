// Package pack fills training rows of a fixed size with several samples
// each, so that every batch of a run has one shape and almost no padding.
//
// A row has RowLen tokens. Each epoch the samples are shuffled, cut into
// windows of Window samples, and each window is packed first-fit
// decreasing: its samples in order of decreasing length, each into the
// first open row of the window where it fits, a new row when none has room. The rows of
// all windows are then shuffled together and dealt into batches of
// Rows×Ranks rows, rank r taking rows [r·Rows, (r+1)·Rows) of each; the
// epoch's last batch is filled up with empty rows. The shuffles come from a
// PCG generator seeded with (Seed, Stream<<32 | epoch), so the batches are a
// pure function of the samples, the Config and the epoch, and a Packer's
// position is a small State that a checkpoint keeps.
//
// Shuffling before packing keeps the samples of a batch unrelated (a
// whole-epoch first-fit decreasing would put the longest samples together
// in the first rows); the window bounds the cost (first-fit over a window's
// open rows) and, with a few thousand samples, costs little packing.
package pack

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
)

// DefaultWindow is the default number of samples packed together.
const DefaultWindow = 4096

// Config sets the rows and the batches.
type Config struct {
	RowLen int    // tokens per row
	Rows   int    // rows per batch of one rank
	Ranks  int    // data-parallel ranks sharing each batch (0: 1)
	Rank   int    // this rank, in [0, Ranks)
	Window int    // samples packed together (0: DefaultWindow)
	Seed   uint64 // shuffling seed
	Stream uint64 // random stream of the seed (trainers pass rngstream.Data)
}

// Batch is one rank's batch: the samples of each of its Rows rows, in the
// order they lie in the row (a row may be empty).
type Batch struct {
	Rows [][]int
}

// State is the position of a Packer: the next batch is batch Batch of
// epoch Epoch. Seed, Samples and RowLen guard against restoring into
// another run.
type State struct {
	Epoch   int    `json:"epoch"`
	Batch   int    `json:"batch"`
	Seed    uint64 `json:"seed"`
	Samples int    `json:"samples"`
	RowLen  int    `json:"row_len"`
}

// Packer hands out packed batches epoch after epoch.
type Packer struct {
	cfg   Config
	lens  []int
	epoch int
	batch int
	plan  [][][]int // the epoch's global batches: Rows×Ranks rows each
}

// New returns a Packer of samples of lengths lens. It is an error when a sample does not
// fit an empty row, when there is no sample, or when the Config is not
// valid.
func New(lens []int, c Config) (*Packer, error) {
	if c.Ranks == 0 {
		c.Ranks = 1
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	switch {
	case c.RowLen < 1 || c.Rows < 1:
		return nil, fmt.Errorf("pack: rows of %d tokens, %d a batch: each must be at least 1", c.RowLen, c.Rows)
	case c.Rank < 0 || c.Rank >= c.Ranks:
		return nil, fmt.Errorf("pack: rank %d of %d", c.Rank, c.Ranks)
	case c.Window < 1:
		return nil, fmt.Errorf("pack: window %d: must be at least 1", c.Window)
	case len(lens) == 0:
		return nil, fmt.Errorf("pack: no samples")
	}
	for i, l := range lens {
		if l < 1 || l > c.RowLen {
			return nil, fmt.Errorf("pack: sample %d has %d tokens, outside a row of %d", i, l, c.RowLen)
		}
	}
	p := &Packer{cfg: c, lens: lens}
	p.plan = p.Plan(0)
	return p, nil
}

// rng returns the generator of an epoch.
func (p *Packer) rng(epoch int) *rand.Rand {
	return rand.New(rand.NewPCG(p.cfg.Seed, p.cfg.Stream<<32|uint64(epoch)))
}

// Rows returns the packed rows of an epoch, in their shuffled order, each
// its samples in row order.
func (p *Packer) Rows(epoch int) [][]int {
	rng := p.rng(epoch)
	perm := rng.Perm(len(p.lens))
	var rows [][]int
	for lo := 0; lo < len(perm); lo += p.cfg.Window {
		rows = append(rows, p.fit(perm[lo:min(lo+p.cfg.Window, len(perm))])...)
	}
	rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	return rows
}

// fit packs the samples idx first-fit decreasing into new rows.
func (p *Packer) fit(idx []int) [][]int {
	idx = slices.Clone(idx)
	slices.SortStableFunc(idx, func(a, b int) int { return p.lens[b] - p.lens[a] })
	var rows [][]int
	var free []int
	for _, i := range idx {
		r := 0
		for r < len(rows) && free[r] < p.lens[i] {
			r++
		}
		if r == len(rows) {
			rows, free = append(rows, nil), append(free, p.cfg.RowLen)
		}
		rows[r] = append(rows[r], i)
		free[r] -= p.lens[i]
	}
	return rows
}

// Plan returns the global batches of an epoch: Rows×Ranks rows each, the
// last filled up with empty rows.
func (p *Packer) Plan(epoch int) [][][]int {
	rows := p.Rows(epoch)
	g := p.cfg.Rows * p.cfg.Ranks
	var plan [][][]int
	for lo := 0; lo < len(rows); lo += g {
		b := make([][]int, g)
		copy(b, rows[lo:min(lo+g, len(rows))])
		plan = append(plan, b)
	}
	return plan
}

// BatchesPerEpoch returns the number of batches of the current epoch.
func (p *Packer) BatchesPerEpoch() int { return len(p.plan) }

// Next returns this rank's share of the next batch.
func (p *Packer) Next() Batch {
	if p.batch == len(p.plan) {
		p.epoch, p.batch = p.epoch+1, 0
		p.plan = p.Plan(p.epoch)
	}
	g := p.plan[p.batch]
	p.batch++
	lo := p.cfg.Rank * p.cfg.Rows
	return Batch{Rows: g[lo : lo+p.cfg.Rows]}
}

// State returns the packer's position.
func (p *Packer) State() State {
	return State{Epoch: p.epoch, Batch: p.batch, Seed: p.cfg.Seed, Samples: len(p.lens), RowLen: p.cfg.RowLen}
}

// Restore moves the packer to st. It is an error when st is of another
// seed, sample count or row length, or past its epoch's end.
func (p *Packer) Restore(st State) error {
	if st.Seed != p.cfg.Seed || st.Samples != len(p.lens) || st.RowLen != p.cfg.RowLen {
		return fmt.Errorf("pack: position of seed %d, %d samples, rows of %d tokens; this run has seed %d, %d samples, rows of %d tokens",
			st.Seed, st.Samples, st.RowLen, p.cfg.Seed, len(p.lens), p.cfg.RowLen)
	}
	plan := p.Plan(st.Epoch)
	if st.Epoch < 0 || st.Batch < 0 || st.Batch > len(plan) {
		return fmt.Errorf("pack: position batch %d of epoch %d: the epoch has %d batches", st.Batch, st.Epoch, len(plan))
	}
	p.epoch, p.batch, p.plan = st.Epoch, st.Batch, plan
	return nil
}

// Report is the packing of one epoch.
type Report struct {
	Samples int     `json:"samples"`
	Rows    int     `json:"rows"` // rows of the epoch's batches, the empty rows of the last included
	Batches int     `json:"batches"`
	RowLen  int     `json:"row_len"`
	Tokens  int64   `json:"tokens"`
	Waste   float64 `json:"waste"` // padded share of the rows' tokens
	PerRow  float64 `json:"samples_per_row"`
}

// Report returns the packing of the first epoch.
func (p *Packer) Report() Report {
	plan := p.Plan(0)
	r := Report{Samples: len(p.lens), Batches: len(plan), RowLen: p.cfg.RowLen}
	for _, b := range plan {
		r.Rows += len(b)
		for _, row := range b {
			for _, i := range row {
				r.Tokens += int64(p.lens[i])
			}
		}
	}
	r.Waste = 1 - float64(r.Tokens)/float64(int64(r.Rows)*int64(r.RowLen))
	r.PerRow = float64(r.Samples) / float64(r.Rows)
	return r
}

// Print writes the report as a few lines of text.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "packed rows of %d tokens: %d rows in %d batches, %.2f samples a row, padding %.1f%% of the rows' tokens\n", r.RowLen, r.Rows, r.Batches, r.PerRow, 100*r.Waste)
}
