package train

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"dflash/tensor"
)

// DefaultCollectiveTimeout bounds a collective call of a LocalGroup made
// with timeout 0: how long a rank waits for the others.
const DefaultCollectiveTimeout = 10 * time.Minute

// ErrRankLost is the cause (errors.Is) of every error of a group in which
// a rank stopped taking part: it timed out, or it left.
var ErrRankLost = errors.New("a rank stopped taking part")

// RankLostError names the ranks a group lost and how.
type RankLostError struct {
	Ranks   []int         // the ranks that did not arrive, or the one that left
	Op      string        // the collective they missed ("" for a rank that left)
	Seq     int           // its 1-based number among the group's collectives (left: the number completed)
	Timeout time.Duration // how long the others waited (0 for a rank that left)
	Why     error         // the reason a rank that left gave
}

func (e *RankLostError) Error() string {
	who := "rank "
	if len(e.Ranks) > 1 {
		who = "ranks "
	}
	for i, r := range e.Ranks {
		if i > 0 {
			who += ", "
		}
		who += strconv.Itoa(r)
	}
	if e.Why != nil {
		return fmt.Sprintf("collective: %s left the group after %d collectives: %v", who, e.Seq, e.Why)
	}
	return fmt.Sprintf("collective: %s did not take part in %s #%d within %s", who, e.Op, e.Seq, e.Timeout)
}

func (e *RankLostError) Unwrap() error { return ErrRankLost }

// LocalGroup is a Collective group of ranks in one process (goroutines,
// one per rank) that exchange through memory. Each collective is one
// barrier: every rank deposits a copy of its buffer, and once all have,
// each rank sums the copies in rank order 0..n-1 in float32 (float64 for
// AllReduceFloat64), so that every rank gets the same bits. A rank that
// does not arrive within the timeout, or that Leaves, fails every other
// rank's call (then and after) with a *RankLostError naming it.
type LocalGroup struct {
	n       int
	timeout time.Duration

	mu      sync.Mutex
	seq     int // collectives completed
	count   int // ranks arrived at collective seq+1
	arrived []bool
	op      string
	slots   [2][]slot     // deposits, by the parity of the collective
	done    chan struct{} // closed when every rank arrived at collective seq+1
	failed  chan struct{} // closed when the group broke
	err     error
}

// slot is one rank's deposit: a copy of its buffer.
type slot struct {
	op  string
	f32 []float32
	f64 []float64
}

// NewLocalGroup returns a group of n ranks whose collectives wait at most
// timeout for every rank (0: DefaultCollectiveTimeout).
func NewLocalGroup(n int, timeout time.Duration) *LocalGroup {
	if n < 1 {
		panic(fmt.Sprintf("train: a group of %d ranks", n))
	}
	if timeout <= 0 {
		timeout = DefaultCollectiveTimeout
	}
	return &LocalGroup{n: n, timeout: timeout, arrived: make([]bool, n),
		slots: [2][]slot{make([]slot, n), make([]slot, n)}, done: make(chan struct{}), failed: make(chan struct{})}
}

// Rank returns rank r's Collective.
func (g *LocalGroup) Rank(r int) Collective {
	if r < 0 || r >= g.n {
		panic(fmt.Sprintf("train: rank %d of a group of %d", r, g.n))
	}
	return localRank{g, r}
}

// Leave takes rank r out of the group, for the reason why: every pending
// and later collective of the other ranks fails at once, naming r.
func (g *LocalGroup) Leave(r int, why error) {
	if why == nil {
		why = errors.New("no reason given")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.breakLocked(&RankLostError{Ranks: []int{r}, Seq: g.seq, Why: why})
}

func (g *LocalGroup) breakLocked(err error) {
	if g.err == nil {
		g.err = err
		close(g.failed)
	}
}

type localRank struct {
	g *LocalGroup
	r int
}

func (c localRank) Rank() int { return c.r }
func (c localRank) Size() int { return c.g.n }

// AllReduceSum sums host buffers (tensor.Host[float32]) over the ranks
// (float32, in rank order).
func (c localRank) AllReduceSum(x Buffer) error {
	h, ok := x.(tensor.Host[float32])
	if !ok {
		return fmt.Errorf("collective: rank %d: a LocalGroup reduces host memory (tensor.Host[float32]), not %T", c.r, x)
	}
	all, err := c.exchange(slot{op: "all-reduce", f32: slices.Clone(h)})
	if err != nil {
		return err
	}
	sumInRankOrder(h, all, func(s slot) []float32 { return s.f32 })
	return nil
}

// AllReduceFloat64 sums host float64 values over the ranks, in rank order.
func (c localRank) AllReduceFloat64(x []float64) error {
	all, err := c.exchange(slot{op: "all-reduce (float64)", f64: slices.Clone(x)})
	if err != nil {
		return err
	}
	sumInRankOrder(x, all, func(s slot) []float64 { return s.f64 })
	return nil
}

// sumInRankOrder sets x[i] to the sum of values(all[r])[i] over the ranks r,
// added in rank order.
func sumInRankOrder[T float32 | float64](x []T, all []slot, values func(slot) []T) {
	for i := range x {
		s := values(all[0])[i]
		for _, o := range all[1:] {
			s += values(o)[i]
		}
		x[i] = s
	}
}

// exchange deposits mine, waits until every rank has deposited (or the
// group breaks) and returns all deposits, in rank order.
func (c localRank) exchange(mine slot) ([]slot, error) {
	g := c.g
	g.mu.Lock()
	if g.err != nil {
		g.mu.Unlock()
		return nil, fmt.Errorf("rank %d: %w", c.r, g.err)
	}
	if g.count == 0 {
		g.op = mine.op
	}
	seq := g.seq + 1
	slots := g.slots[seq%2]
	slots[c.r] = mine
	g.arrived[c.r] = true
	g.count++
	done := g.done
	if g.count == g.n {
		close(g.done)
		g.seq, g.count, g.done = seq, 0, make(chan struct{})
		clear(g.arrived)
	}
	g.mu.Unlock()

	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-g.failed:
	case <-timer.C:
		g.timedOut(seq)
	}
	select {
	case <-done: // complete, even if the group broke afterwards
	default:
		g.mu.Lock()
		defer g.mu.Unlock()
		return nil, fmt.Errorf("rank %d: %w", c.r, g.err)
	}
	return slots, checkSlots(c.r, seq, slots)
}

// timedOut breaks the group, naming the ranks missing from collective seq.
func (g *LocalGroup) timedOut(seq int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seq >= seq {
		return // completed meanwhile
	}
	var missing []int
	for r, ok := range g.arrived {
		if !ok {
			missing = append(missing, r)
		}
	}
	g.breakLocked(&RankLostError{Ranks: missing, Op: g.op, Seq: seq, Timeout: g.timeout})
}

// checkSlots returns an error unless every rank deposited the same kind
// and length (ranks that called different collectives, or passed buffers
// of different sizes: a programming error on some rank).
func checkSlots(r, seq int, all []slot) error {
	a := all[0]
	for q, s := range all[1:] {
		if s.op != a.op || len(s.f32) != len(a.f32) || len(s.f64) != len(a.f64) {
			return fmt.Errorf("collective: rank %d: collective #%d: rank %d called %s of %d values, rank 0 %s of %d",
				r, seq, q+1, s.op, len(s.f32)+len(s.f64), a.op, len(a.f32)+len(a.f64))
		}
	}
	return nil
}
