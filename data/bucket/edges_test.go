package bucket

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"dflash/internal/testseed"
)

// bruteLens returns the least padded tokens over every subset of the
// distinct rounded lengths that holds the largest and has at most n
// members, the reference for ChooseLens.
func bruteLens(lengths []int, edge, n int) int64 {
	var vals []int
	for _, l := range lengths {
		vals = append(vals, (l+edge-1)/edge*edge)
	}
	slices.Sort(vals)
	vals = slices.Compact(vals)
	m := len(vals)
	best := int64(-1)
	for mask := 0; mask < 1<<(m-1); mask++ { // the largest is always in
		var lens []int
		for i := 0; i < m-1; i++ {
			if mask&(1<<i) != 0 {
				lens = append(lens, vals[i])
			}
		}
		lens = append(lens, vals[m-1])
		if len(lens) > n {
			continue
		}
		var padded int64
		for _, l := range lengths {
			for _, b := range lens {
				if b >= l {
					padded += int64(b)
					break
				}
			}
		}
		if best < 0 || padded < best {
			best = padded
		}
	}
	return best
}

// TestChooseLensBruteForce compares the dynamic program's padded tokens with
// the best of every subset of bucket lengths on small random histograms, and
// checks the lengths it returns: ascending, multiples of the edge, at most n,
// the largest covering the longest sample.
func TestChooseLensBruteForce(t *testing.T) {
	rng := testseed.New(t)
	for trial := range 300 {
		edge := 1 + rng.IntN(16)
		lengths := make([]int, 1+rng.IntN(40))
		span := 1 + rng.IntN(12*edge)
		for i := range lengths {
			lengths[i] = 1 + rng.IntN(span)
		}
		n := 1 + rng.IntN(6)
		lens, err := ChooseLens(lengths, edge, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(lens) > n || !slices.IsSorted(lens) || len(slices.Compact(slices.Clone(lens))) != len(lens) {
			t.Fatalf("trial %d: lens %v for n %d", trial, lens, n)
		}
		for _, b := range lens {
			if b%edge != 0 || b <= 0 {
				t.Fatalf("trial %d: length %d is not a positive multiple of %d", trial, b, edge)
			}
		}
		if want := (slices.Max(lengths) + edge - 1) / edge * edge; lens[len(lens)-1] != want {
			t.Fatalf("trial %d: largest bucket %d, want %d", trial, lens[len(lens)-1], want)
		}
		got, ok := PaddedTokens(lengths, lens)
		if want := bruteLens(lengths, edge, n); !ok || got != want {
			t.Fatalf("trial %d (edge %d, n %d, lengths %v): lens %v pad to %d tokens, the best subset to %d", trial, edge, n, lengths, lens, got, want)
		}
	}
}

// TestChooseLensDeterministic: the lengths are a function of the multiset of
// sample lengths, whatever their order, and more buckets never pad more.
func TestChooseLensDeterministic(t *testing.T) {
	lengths := randomLengths(t, 2000)
	a, err := ChooseLens(lengths, 128, 6)
	if err != nil {
		t.Fatal(err)
	}
	shuffled := slices.Clone(lengths)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	b, _ := ChooseLens(shuffled, 128, 6)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("%v, then %v for the same lengths shuffled", a, b)
	}
	prev := int64(-1)
	for n := 1; n <= 40; n++ {
		lens, _ := ChooseLens(lengths, 128, n)
		p, ok := PaddedTokens(lengths, lens)
		if !ok || (prev >= 0 && p > prev) {
			t.Fatalf("%d buckets pad to %d tokens, %d buckets to %d", n, p, n-1, prev)
		}
		prev = p
	}
}

func TestChooseLensErrors(t *testing.T) {
	for _, c := range []struct {
		lengths []int
		edge, n int
		want    string
	}{
		{[]int{5, 0}, 128, 2, "sample 1 has length 0"},
		{[]int{5}, 0, 2, "edge must be positive, got 0"},
		{[]int{5}, 128, 0, "number of buckets must be at least 1, got 0"},
	} {
		if _, err := ChooseLens(c.lengths, c.edge, c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ChooseLens(%v, %d, %d): %v, want %q", c.lengths, c.edge, c.n, err, c.want)
		}
	}
	if _, err := New([]int{5}, Config{TokenBudget: 512, MaxBuckets: -1}); err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("MaxBuckets -1: %v", err)
	}
}

// TestSamplerMaxBuckets: with MaxBuckets every batch has one of the chosen
// lengths, every sample sits in the shortest bucket that holds it, PadRows
// gives every batch of a bucket the same rows, and the report's padded
// tokens are recounted from the batches.
func TestSamplerMaxBuckets(t *testing.T) {
	lengths := randomLengths(t, 3000)
	cfg := Config{TokenBudget: 8192, Seed: 5, MaxBuckets: 4, PadRows: true}
	s, err := New(lengths, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lens, _ := ChooseLens(lengths, DefaultEdge, 4)
	if !reflect.DeepEqual(s.Lens(), lens) {
		t.Fatalf("sampler lens %v, ChooseLens %v", s.Lens(), lens)
	}
	rows := map[int]int{}
	var padded, tokens int64
	seen := 0
	for _, b := range s.Plan(0) {
		if r, ok := rows[b.Len]; ok && r != b.Rows {
			t.Fatalf("bucket %d has batches of %d and %d rows", b.Len, r, b.Rows)
		}
		rows[b.Len] = b.Rows
		if b.Rows != s.BatchSize(b.Len) || len(b.Indices) > b.Rows {
			t.Fatalf("batch of %d samples in %d rows, bucket %d batch size %d", len(b.Indices), b.Rows, b.Len, s.BatchSize(b.Len))
		}
		i, _ := slices.BinarySearch(lens, b.Len)
		for _, j := range b.Indices {
			if l := lengths[j]; l > b.Len || (i > 0 && l <= lens[i-1]) {
				t.Fatalf("sample of length %d in bucket %d of %v", l, b.Len, lens)
			}
			tokens += int64(lengths[j])
			seen++
		}
		padded += int64(b.Rows * b.Len)
	}
	if seen != len(lengths) || len(rows) != 4 {
		t.Fatalf("%d samples in %d buckets", seen, len(rows))
	}
	r := s.Report()
	if r.Padded != padded || r.Tokens != tokens || len(r.Buckets) != 4 {
		t.Fatalf("report padded %d tokens %d over %d buckets, recount %d and %d", r.Padded, r.Tokens, len(r.Buckets), padded, tokens)
	}
	for _, b := range r.Buckets {
		if b.Rows != s.BatchSize(b.Len) || b.Waste != 1-float64(b.Tokens)/float64(b.Padded) {
			t.Fatalf("bucket stats %+v", b)
		}
	}
	// Without pad rows the only padding is in length: the report agrees
	// with PaddedTokens.
	cfg.PadRows = false
	s, _ = New(lengths, cfg)
	if p, _ := PaddedTokens(lengths, lens); s.Report().Padded != p {
		t.Fatalf("report padded %d, PaddedTokens %d", s.Report().Padded, p)
	}
	// A state of other buckets is refused.
	st := s.State()
	cfg.MaxBuckets = 5
	o, _ := New(lengths, cfg)
	if err := o.Restore(st); err == nil || !strings.Contains(err.Error(), "buckets") {
		t.Fatalf("restore across bucket lengths: %v", err)
	}
}
