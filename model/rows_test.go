package model

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// TestReadRows: rows read greedily hold each row's first maximal index (a
// tie forced in every row), rows read for sampling the logits themselves,
// and Pick at temperature 0 chooses the same token from either.
func TestReadRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 3))
	cpu := tensor.NewCPU[float32](2)
	const rows, V = 5, 37
	x := make([]float32, rows*V)
	want := make([]int32, rows)
	for r := range rows {
		row := x[r*V : (r+1)*V]
		for j := range row {
			row[j] = float32(rng.NormFloat64())
		}
		a, b := rng.IntN(V), rng.IntN(V)
		row[a], row[b] = 10, 10 // the maximum, twice (or once where a = b)
		want[r] = int32(min(a, b))
	}
	logits := tensor.FromData("logits", x, rows, V)
	g := ReadRows(cpu, logits, true)
	if !slices.Equal(g.IDs, want) || g.Logits != nil || g.Len() != rows {
		t.Fatalf("greedy rows: ids %v (want %v), %d logits, length %d", g.IDs, want, len(g.Logits), g.Len())
	}
	s := ReadRows(cpu, logits, false)
	if s.IDs != nil || s.Len() != rows || !slices.Equal(s.Row(3), x[3*V:4*V]) {
		t.Fatalf("sampling rows: %d ids, length %d, row 3 %v", len(s.IDs), s.Len(), s.Row(3))
	}
	for r := range rows {
		if a, b := g.Pick(r, 0, 0, nil), s.Pick(r, 0, 0, nil); a != want[r] || b != want[r] {
			t.Errorf("row %d: greedy Pick %d from ids, %d from logits, want %d", r, a, b, want[r])
		}
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "no logits") {
			t.Errorf("Row of greedy rows: panic %v, want one saying there are no logits", p)
		}
	}()
	g.Row(0)
}
