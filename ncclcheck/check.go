package ncclcheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"dflash/dtype"
)

// DefaultWarmup is the number of untimed all-reduces before each timing.
const DefaultWarmup = 5

// Plan says what a check runs.
type Plan struct {
	Sizes  []int64       // bytes per all-reduce, each a multiple of every dtype's size
	DTypes []dtype.DType // dtype.BF16, dtype.F32
	Iters  int           // timed all-reduces per size; 0 picks AutoIters
	Warmup int           // untimed all-reduces before timing; 0 means DefaultWarmup, <0 none
}

// Validate returns an error naming the first size that is not a whole
// number of elements of every dtype, or an empty plan.
func (p Plan) Validate() error {
	if len(p.Sizes) == 0 || len(p.DTypes) == 0 {
		return fmt.Errorf("ncclcheck: the plan needs at least one size and one dtype")
	}
	for _, t := range p.DTypes {
		if t != dtype.BF16 && t != dtype.F32 {
			return fmt.Errorf("ncclcheck: dtype %v: want bf16 or f32", t)
		}
		for _, n := range p.Sizes {
			if n <= 0 || n%int64(t.Size()) != 0 {
				return fmt.Errorf("ncclcheck: size %d bytes is not a whole number of %s elements (%d bytes each)", n, t.String(), t.Size())
			}
		}
	}
	return nil
}

// AutoIters returns the timed iterations for an all-reduce of bytes:
// enough calls to move about 1 GiB, between 20 and 500.
func AutoIters(bytes int64) int {
	return int(min(500, max(20, (1<<30)/bytes)))
}

func (p Plan) iters(bytes int64) int {
	if p.Iters > 0 {
		return p.Iters
	}
	return AutoIters(bytes)
}

func (p Plan) warmup() int {
	switch {
	case p.Warmup < 0:
		return 0
	case p.Warmup == 0:
		return DefaultWarmup
	}
	return p.Warmup
}

// Mem is device memory as a Rank hands it out.
type Mem interface{ Len() int64 }

// Rank is one rank's device and communicator as the check drives them.
// Upload, Download and Sync wait for the work queued before them; Memset,
// Copy and AllReduce are queued in order on one stream.
type Rank interface {
	Rank() int
	NRanks() int
	Alloc(bytes int64) (Mem, error)
	Free(m Mem)
	Upload(dst Mem, off int64, src []byte) error
	Download(dst []byte, src Mem, off int64) error
	Memset(dst Mem, v byte) error
	Copy(dst Mem, dstOff int64, src Mem, srcOff, n int64) error
	// AllReduce queues recv = sum over ranks of send, count elements of t.
	AllReduce(send, recv Mem, count int, t dtype.DType) error
	// Time returns the device time of iters calls of op, queued back to back.
	Time(iters int, op func() error) (time.Duration, error)
	Sync() error
}

// Row is one (dtype, size) of a check.
type Row struct {
	DType      string  `json:"dtype"`
	Bytes      int64   `json:"bytes"`
	Count      int64   `json:"count"`
	Exact      bool    `json:"exact"`
	Mismatches int64   `json:"mismatches"`
	FirstBad   string  `json:"first_bad,omitempty"` // "element i: got x, want y" (and the rank, once merged)
	Iters      int     `json:"iters"`
	TimeUS     float64 `json:"time_us"` // per all-reduce; the slowest rank once merged
	AlgBW      float64 `json:"algbw_gbs"`
	BusBW      float64 `json:"busbw_gbs"`
	SHA256     string  `json:"sha256"`  // of the result bytes
	Agree      bool    `json:"agree"`   // every rank read back the same bytes
	Ranks      int     `json:"nranks"`  // ranks in the communicator
	Reported   int     `json:"reports"` // ranks whose rows were merged into this one
}

// RankResult is what one rank measured.
type RankResult struct {
	Rank, NRanks int
	Rows         []Row
}

// RunRank runs plan on r: per dtype it fills a send buffer with r's inputs,
// and per size it all-reduces into a result buffer filled with NaN,
// verifies every element and times the all-reduce. Every rank of the
// communicator must run the same plan at the same time. A wrong result is
// reported in its Row, not as an error; errors are CUDA or NCCL failures.
func RunRank(ctx context.Context, r Rank, plan Plan) (*RankResult, error) {
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	maxBytes := slices.Max(plan.Sizes)
	send, err := r.Alloc(maxBytes)
	if err != nil {
		return nil, fmt.Errorf("ncclcheck: rank %d: send buffer of %s: %w", r.Rank(), FormatBytes(maxBytes), err)
	}
	defer r.Free(send)
	recv, err := r.Alloc(maxBytes)
	if err != nil {
		return nil, fmt.Errorf("ncclcheck: rank %d: result buffer of %s: %w", r.Rank(), FormatBytes(maxBytes), err)
	}
	defer r.Free(recv)
	res := &RankResult{Rank: r.Rank(), NRanks: r.NRanks()}
	for _, t := range plan.DTypes {
		if err := fill(r, send, maxBytes/int64(t.Size()), t); err != nil {
			return nil, err
		}
		want := expectedBlock(t, r.NRanks()) // the same for every size: built once
		for _, size := range plan.Sizes {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			row, err := runSize(r, plan, send, recv, size, t, want)
			if err != nil {
				return nil, fmt.Errorf("ncclcheck: rank %d, %s %s: %w", r.Rank(), t.String(), FormatBytes(size), err)
			}
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

// fill writes the rank's first n inputs into send: one block uploaded, then
// doubled by device copies (the inputs repeat with the block's length).
func fill(r Rank, send Mem, n int64, t dtype.DType) error {
	e := int64(t.Size())
	tile := min(n, blockElems(r.NRanks()))
	if err := r.Upload(send, 0, RankInput(r.Rank(), r.NRanks(), tile, t)); err != nil {
		return fmt.Errorf("ncclcheck: rank %d: upload inputs: %w", r.Rank(), err)
	}
	for done := tile; done < n; {
		k := min(done, n-done)
		if err := r.Copy(send, done*e, send, 0, k*e); err != nil {
			return fmt.Errorf("ncclcheck: rank %d: replicate inputs: %w", r.Rank(), err)
		}
		done += k
	}
	return r.Sync()
}

// runSize verifies and times one all-reduce of size bytes of t; want is
// expectedBlock(t, r.NRanks()).
func runSize(r Rank, plan Plan, send, recv Mem, size int64, t dtype.DType, want []byte) (Row, error) {
	count := size / int64(t.Size())
	row := Row{DType: t.String(), Bytes: size, Count: count, Ranks: r.NRanks(), Reported: 1, Agree: true}
	op := func() error { return r.AllReduce(send, recv, int(count), t) }
	if err := r.Memset(recv, 0xff); err != nil { // NaN in bf16 and f32
		return row, err
	}
	if err := op(); err != nil {
		return row, err
	}
	if err := r.Sync(); err != nil {
		return row, err
	}
	v := newVerifier(t, want)
	chunk := make([]byte, min(size, int64(len(want))))
	for off := int64(0); off < size; off += int64(len(chunk)) {
		c := chunk[:min(int64(len(chunk)), size-off)]
		if err := r.Download(c, recv, off); err != nil {
			return row, err
		}
		v.check(c)
	}
	row.SHA256, row.Mismatches, row.Exact = v.digest(), v.mismatches, v.mismatches == 0
	if v.firstBad >= 0 {
		row.FirstBad = fmt.Sprintf("rank %d element %d: got %g, want %g", r.Rank(), v.firstBad, v.got, v.exp)
	}
	for range plan.warmup() {
		if err := op(); err != nil {
			return row, err
		}
	}
	row.Iters = plan.iters(size)
	d, err := r.Time(row.Iters, op)
	if err != nil {
		return row, err
	}
	per := d / time.Duration(row.Iters)
	row.TimeUS = float64(d.Nanoseconds()) / 1e3 / float64(row.Iters)
	row.AlgBW, row.BusBW = AlgBW(size, per), BusBW(size, per, r.NRanks())
	return row, nil
}

// Merge combines the results of every rank of one communicator (one
// process) into one row per (dtype, size): exact when every rank's result
// is, the slowest rank's time, Agree when all read back the same bytes.
func Merge(results []*RankResult) []Row {
	if len(results) == 0 {
		return nil
	}
	rows := slices.Clone(results[0].Rows)
	for _, res := range results[1:] {
		if len(res.Rows) != len(rows) {
			panic(fmt.Sprintf("ncclcheck: rank %d has %d rows, rank %d has %d", res.Rank, len(res.Rows), results[0].Rank, len(rows)))
		}
		for i, o := range res.Rows {
			m := &rows[i]
			if o.DType != m.DType || o.Bytes != m.Bytes {
				panic(fmt.Sprintf("ncclcheck: rank %d row %d is %s %d bytes, want %s %d", res.Rank, i, o.DType, o.Bytes, m.DType, m.Bytes))
			}
			m.Exact = m.Exact && o.Exact
			m.Mismatches += o.Mismatches
			if m.FirstBad == "" {
				m.FirstBad = o.FirstBad
			}
			m.Agree = m.Agree && o.Agree && o.SHA256 == m.SHA256
			m.Reported += o.Reported
			if o.TimeUS > m.TimeUS {
				m.TimeUS, m.AlgBW, m.BusBW, m.Iters = o.TimeUS, o.AlgBW, o.BusBW, o.Iters
			}
		}
	}
	return rows
}

// Checksum returns the hex SHA-256 over nranks and each row's dtype, size
// and result digest: equal for two runs of the same shape exactly when
// every result byte is.
func Checksum(nranks int, rows []Row) string {
	h := sha256.New()
	fmt.Fprintf(h, "dflash nccl check v1\nnranks %d\n", nranks)
	for _, r := range rows {
		fmt.Fprintf(h, "%s %d %s\n", r.DType, r.Bytes, r.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Failures lists, one line per row, what is wrong: inexact results and
// ranks that disagree.
func Failures(rows []Row) []string {
	var out []string
	for _, r := range rows {
		var why []string
		if !r.Exact {
			why = append(why, fmt.Sprintf("%d wrong elements (first: %s)", r.Mismatches, r.FirstBad))
		}
		if !r.Agree {
			why = append(why, "ranks read back different bytes")
		}
		if len(why) > 0 {
			out = append(out, fmt.Sprintf("%s %s: %s", r.DType, FormatBytes(r.Bytes), strings.Join(why, "; ")))
		}
	}
	return out
}
