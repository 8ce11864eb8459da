package train

import (
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// TestLocalGroupSum: for 1..4 ranks, AllReduceSum over buffers split into
// uneven segments gives every rank the same bits, within float32 rounding
// of the float64 sum, and AllReduceFloat64 gives the exact float64 sum in
// rank order; several collectives in a row keep their order.
func TestLocalGroupSum(t *testing.T) {
	seed := testseed.Seed(t)
	for ranks := 1; ranks <= 4; ranks++ {
		rng := NewRNG(seed, uint64(ranks))
		const n, rounds = 37, 5
		in := make([][][]float32, rounds) // in[round][rank]
		for k := range in {
			for range ranks {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				in[k] = append(in[k], x)
			}
		}
		g := NewLocalGroup(ranks, time.Minute)
		out := make([][][]float32, ranks)
		outF := make([][]float64, ranks)
		var wg sync.WaitGroup
		errs := make([]error, ranks)
		for r := range ranks {
			wg.Go(func() {
				c := g.Rank(r)
				for k := range rounds {
					x := slices.Clone(in[k][r])
					if err := c.AllReduceSum(tensor.Host[float32](x)); err != nil {
						errs[r] = err
						return
					}
					out[r] = append(out[r], x)
				}
				f := []float64{float64(r) + 0.1, 1e-17}
				errs[r] = c.AllReduceFloat64(f)
				outF[r] = f
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		for k := range rounds {
			for i := range n {
				var want float64
				for r := range ranks {
					want += float64(in[k][r][i])
				}
				got := out[0][k][i]
				if d := math.Abs(float64(got) - want); d > float64(ranks)*6e-8*(math.Abs(want)+4) {
					t.Fatalf("%d ranks, round %d, element %d: %v, want %v", ranks, k, i, got, want)
				}
				for r := 1; r < ranks; r++ {
					if math.Float32bits(out[r][k][i]) != math.Float32bits(got) {
						t.Fatalf("%d ranks, round %d, element %d: rank %d has %v, rank 0 %v", ranks, k, i, r, out[r][k][i], got)
					}
				}
			}
		}
		var want0 float64
		for r := range ranks {
			want0 += float64(r) + 0.1
		}
		for r := range ranks {
			if outF[r][0] != want0 || outF[r][1] != float64(ranks)*1e-17 {
				t.Fatalf("%d ranks: rank %d float64 sums %v, want [%v %v]", ranks, r, outF[r], want0, float64(ranks)*1e-17)
			}
		}
	}
}

// TestLocalGroupLostRank: a rank that never calls (it failed or hangs)
// makes every other rank's collective fail after the timeout, naming it;
// a rank that Leaves fails the others at once; later calls fail too.
func TestLocalGroupLostRank(t *testing.T) {
	const ranks, lost = 3, 2
	for _, leave := range []bool{false, true} {
		timeout := 150 * time.Millisecond
		if leave {
			timeout = time.Hour // Leave must not wait for it
		}
		g := NewLocalGroup(ranks, timeout)
		errs := make([]error, ranks)
		took := make([]time.Duration, ranks)
		var wg sync.WaitGroup
		for r := range ranks - 1 {
			wg.Go(func() {
				c := g.Rank(r)
				start := time.Now()
				x := []float32{1}
				if errs[r] = c.AllReduceSum(tensor.Host[float32](x)); errs[r] != nil {
					return // the lost rank took part in the first
				}
				errs[r] = c.AllReduceSum(tensor.Host[float32](x))
				took[r] = time.Since(start)
			})
		}
		c := g.Rank(lost)
		if err := c.AllReduceSum(tensor.Host[float32]{1}); err != nil {
			t.Fatal(err)
		}
		if leave {
			g.Leave(lost, errors.New("step 2: out of memory"))
		}
		wg.Wait()
		for r := range ranks - 1 {
			var lostErr *RankLostError
			if !errors.As(errs[r], &lostErr) || !errors.Is(errs[r], ErrRankLost) || !slices.Equal(lostErr.Ranks, []int{lost}) {
				t.Fatalf("leave %v: rank %d: %v, want a RankLostError naming rank %d", leave, r, errs[r], lost)
			}
			msg := errs[r].Error()
			if !strings.Contains(msg, "rank 2 ") || leave && !strings.Contains(msg, "out of memory") {
				t.Errorf("leave %v: rank %d: message %q does not say which rank and why", leave, r, msg)
			}
			if !leave && (took[r] < timeout || took[r] > timeout+5*time.Second) {
				t.Errorf("rank %d failed after %s, timeout %s", r, took[r], timeout)
			}
		}
		if err := c.AllReduceSum(tensor.Host[float32]{1}); !errors.Is(err, ErrRankLost) {
			t.Fatalf("leave %v: a call after the failure: %v", leave, err)
		}
	}
}

// TestLocalGroupMismatch: ranks that pass buffers of different lengths get
// an error naming the rank that differs, not a wrong sum.
func TestLocalGroupMismatch(t *testing.T) {
	g := NewLocalGroup(2, time.Minute)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { errs[r] = g.Rank(r).AllReduceSum(make(tensor.Host[float32], 3+r)) })
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 1 called all-reduce of 4 values, rank 0 all-reduce of 3") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
