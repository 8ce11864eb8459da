package bucket

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"dflash/internal/testseed"
)

func randomLengths(t *testing.T, n int) []int {
	rng := testseed.New(t)
	out := make([]int, n)
	for i := range out {
		out[i] = 1 + int(rng.ExpFloat64()*400)%4000
	}
	return out
}

func TestEpochCoversEverySampleOnce(t *testing.T) {
	lengths := randomLengths(t, 3000)
	for _, c := range []Config{
		{TokenBudget: 8192, Seed: 1},
		{TokenBudget: 8192, Seed: 2, MaxBatch: 8},
		{Edge: 64, TokenBudget: 4096, Seed: 3},
	} {
		s, err := New(lengths, c)
		if err != nil {
			t.Fatal(err)
		}
		edge := c.Edge
		if edge == 0 {
			edge = DefaultEdge
		}
		seen := make([]int, len(lengths))
		for _, b := range s.Plan(0) {
			if b.Len%edge != 0 {
				t.Fatalf("bucket length %d is not a multiple of %d", b.Len, edge)
			}
			if len(b.Indices)*b.Len > c.TokenBudget && len(b.Indices) > 1 {
				t.Fatalf("batch of %d x %d over budget %d", len(b.Indices), b.Len, c.TokenBudget)
			}
			if c.MaxBatch > 0 && len(b.Indices) > c.MaxBatch {
				t.Fatalf("batch of %d over MaxBatch %d", len(b.Indices), c.MaxBatch)
			}
			for _, i := range b.Indices {
				seen[i]++
				if l := lengths[i]; l > b.Len || l <= b.Len-edge {
					t.Fatalf("sample of length %d in bucket %d", l, b.Len)
				}
			}
		}
		for i, n := range seen {
			if n != 1 {
				t.Fatalf("sample %d appears %d times", i, n)
			}
		}
	}
}

func TestDeterministicAndShuffled(t *testing.T) {
	lengths := randomLengths(t, 2000)
	cfg := Config{TokenBudget: 16384, Seed: 42}
	a, _ := New(lengths, cfg)
	b, _ := New(lengths, cfg)
	if !reflect.DeepEqual(a.Plan(0), b.Plan(0)) || !reflect.DeepEqual(a.Plan(3), b.Plan(3)) {
		t.Fatal("same seed, different plans")
	}
	if reflect.DeepEqual(a.Plan(0), a.Plan(1)) {
		t.Fatal("epochs 0 and 1 have the same plan")
	}
	cfg.Seed = 43
	c, _ := New(lengths, cfg)
	if reflect.DeepEqual(a.Plan(0), c.Plan(0)) {
		t.Fatal("different seeds, same plan")
	}
	// Shuffled across buckets: consecutive batches rarely share a bucket,
	// where an unshuffled plan would almost always.
	plan := a.Plan(0)
	same := 0
	for i := 1; i < len(plan); i++ {
		if plan[i].Len == plan[i-1].Len {
			same++
		}
	}
	if frac := float64(same) / float64(len(plan)-1); frac > 0.5 {
		t.Fatalf("%.0f%% of consecutive batches share a bucket: not shuffled across buckets", 100*frac)
	}
}

func TestResume(t *testing.T) {
	lengths := randomLengths(t, 500)
	cfg := Config{TokenBudget: 4096, Seed: 7}
	ref, _ := New(lengths, cfg)
	per := ref.BatchesPerEpoch()
	for _, skip := range []int{0, 1, per - 1, per, per + 3, 2*per + 5} {
		a, _ := New(lengths, cfg)
		for i := 0; i < skip; i++ {
			a.Next()
		}
		blob, err := json.Marshal(a.State())
		if err != nil {
			t.Fatal(err)
		}
		var st State
		json.Unmarshal(blob, &st)
		b, _ := New(lengths, cfg)
		if err := b.Restore(st); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < per+2; i++ {
			x, y := a.Next(), b.Next()
			if !reflect.DeepEqual(x, y) {
				t.Fatalf("skip %d: batch %d after restore differs", skip, i)
			}
		}
	}
	other, _ := New(lengths[:400], cfg)
	if err := other.Restore(ref.State()); err == nil {
		t.Fatal("restore into a sampler over other samples succeeded")
	}
}

func TestReport(t *testing.T) {
	lengths := randomLengths(t, 1000)
	s, _ := New(lengths, Config{TokenBudget: 8192, Seed: 1})
	r := s.Report()
	// Independent recount from the lengths alone.
	var tokens, padded int64
	longest := 0
	for _, l := range lengths {
		tokens += int64(l)
		padded += int64((l + 127) / 128 * 128)
		longest = max(longest, l)
	}
	unb := 1 - float64(tokens)/float64(int64(len(lengths))*int64((longest+127)/128*128))
	if r.Tokens != tokens || r.Padded != padded || r.Samples != len(lengths) || r.Batches != s.BatchesPerEpoch() {
		t.Fatalf("report %+v; want tokens %d padded %d", r, tokens, padded)
	}
	if d := r.Waste - (1 - float64(tokens)/float64(padded)); d > 1e-12 || d < -1e-12 {
		t.Fatalf("waste %v", r.Waste)
	}
	if d := r.WasteUnbucketed - unb; d > 1e-12 || d < -1e-12 {
		t.Fatalf("unbucketed waste %v want %v", r.WasteUnbucketed, unb)
	}
	var sb strings.Builder
	r.Print(&sb)
	if !strings.Contains(sb.String(), "padding waste") {
		t.Fatal(sb.String())
	}
}

func TestErrors(t *testing.T) {
	if _, err := New([]int{100, 9000}, Config{TokenBudget: 8192}); err == nil || !strings.Contains(err.Error(), "sample 1") {
		t.Fatalf("got %v", err)
	}
	if _, err := New([]int{100}, Config{}); err == nil {
		t.Fatal("zero budget accepted")
	}
	if _, err := New(nil, Config{TokenBudget: 10}); err == nil {
		t.Fatal("no samples accepted")
	}
}

func TestDropLast(t *testing.T) {
	lengths := make([]int, 10)
	for i := range lengths {
		lengths[i] = 100 // one bucket of 128; 4 per batch of 512
	}
	s, _ := New(lengths, Config{TokenBudget: 512, DropLast: true})
	if n := s.BatchesPerEpoch(); n != 2 {
		t.Fatalf("%d batches, want 2", n)
	}
	s, _ = New(lengths, Config{TokenBudget: 512})
	if n := s.BatchesPerEpoch(); n != 3 {
		t.Fatalf("%d batches, want 3", n)
	}
}
