package pack

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// chatLens returns n log-normal lengths (median 763, p90 about 1918, at
// least 40 and at most maxLen tokens): the shape of real chat data.
func chatLens(n, maxLen int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 7))
	lens := make([]int, n)
	for i := range lens {
		lens[i] = min(maxLen, max(40, int(math.Exp(math.Log(763)+0.72*rng.NormFloat64()))))
	}
	return lens
}

// TestPackEpoch checks an epoch's batches against the rules: every sample
// exactly once, no row over its tokens, every batch Rows×Ranks
// rows, and padding under 5% on chat lengths.
func TestPackEpoch(t *testing.T) {
	lens := chatLens(2500, 3072, 1)
	c := Config{RowLen: 3072, Rows: 4, Ranks: 2, Seed: 3}
	p, err := New(lens, c)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]int, len(lens))
	for _, b := range p.Plan(0) {
		if len(b) != 8 {
			t.Fatalf("a batch of %d rows, want 8", len(b))
		}
		for _, row := range b {
			tokens := 0
			for _, i := range row {
				seen[i]++
				tokens += lens[i]
			}
			if tokens > c.RowLen {
				t.Fatalf("row %v: %d tokens, over %d", row, tokens, c.RowLen)
			}
		}
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("sample %d packed %d times", i, n)
		}
	}
	r := p.Report()
	if r.Waste > 0.05 || r.Samples != len(lens) {
		t.Errorf("report %+v: want padding under 5%%", r)
	}
	t.Logf("%+v", r)
}

// TestPackDeterministicAndResumable checks that a packer's batches are a
// pure function of its Config and that a restored position continues the
// same sequence, into the next epoch, and that ranks share each batch.
func TestPackDeterministicAndResumable(t *testing.T) {
	items := chatLens(300, 2048, 2)
	c := Config{RowLen: 2048, Rows: 2, Seed: 9}
	a, _ := New(items, c)
	b, _ := New(items, c)
	var st State
	var rest [][][]int
	for i := range 3 * a.BatchesPerEpoch() {
		x, y := a.Next(), b.Next()
		if !equalRows(x.Rows, y.Rows) {
			t.Fatalf("batch %d differs between two packers of one config", i)
		}
		if i == a.BatchesPerEpoch()+3 {
			st = a.State()
		}
		if i > a.BatchesPerEpoch()+3 {
			rest = append(rest, x.Rows)
		}
	}
	r, _ := New(items, c)
	if err := r.Restore(st); err != nil {
		t.Fatal(err)
	}
	for i, want := range rest {
		if got := r.Next(); !equalRows(got.Rows, want) {
			t.Fatalf("batch %d after the restore differs", i)
		}
	}
	other := c
	other.Seed++
	o, _ := New(items, other)
	if err := o.Restore(st); err == nil {
		t.Error("a position of another seed was restored")
	}
	// Two ranks: each gets its half of the one-rank packer's global batch.
	c2 := c
	c2.Rows, c2.Ranks = 1, 2
	r0c, r1c := c2, c2
	r1c.Rank = 1
	r0, _ := New(items, r0c)
	r1, _ := New(items, r1c)
	one, _ := New(items, c)
	for i := range 10 {
		g := one.Next().Rows
		if !equalRows(r0.Next().Rows, g[:1]) || !equalRows(r1.Next().Rows, g[1:]) {
			t.Fatalf("batch %d: the ranks' rows are not the global batch's halves", i)
		}
	}
}

func equalRows(a, b [][]int) bool {
	return slices.EqualFunc(a, b, func(x, y []int) bool { return slices.Equal(x, y) })
}

// TestPackRefuses checks the errors for a sample that fits no row and a
// bad Config.
func TestPackRefuses(t *testing.T) {
	if _, err := New([]int{10, 200}, Config{RowLen: 128, Rows: 1}); err == nil {
		t.Error("a sample over the row length was accepted")
	}
	if _, err := New([]int{10}, Config{RowLen: 128, Rows: 0}); err == nil {
		t.Error("zero rows a batch were accepted")
	}
	if _, err := New([]int{10}, Config{RowLen: 128, Rows: 1, Ranks: 2, Rank: 2}); err == nil {
		t.Error("rank 2 of 2 was accepted")
	}
}
