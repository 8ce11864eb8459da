package tensorcuda

import (
	"strings"
	"testing"

	"dflash/tensor"
)

// TestFrozenPlan checks the layout of a frozen arena with FP8 matrices
// against an element-by-element map built independently: every element of
// the arena lands at its own place (bf16 elements packed in arena order,
// FP8 codes too, a scale per FP8 row), adjacent FP8 segments of one row
// length form one run (a Span of them is one view) and of different
// lengths two, and findRun refuses a range across kinds or runs.
func TestFrozenPlan(t *testing.T) {
	// arena: [0,10) bf16 | [10,42) fp8 rows of 16 | [42,74) fp8 rows of 16 | [74,106) fp8 rows of 32 | [106,110) bf16 | [110,142) fp8 rows of 16
	segs := []tensor.Segment{seg(10, 32, 16), seg(42, 32, 16), seg(74, 32, 32), seg(110, 32, 16)}
	const n = 142
	runs, nbf, ncodes, nrows, err := frozenPlan(n, segs)
	if err != nil {
		t.Fatal(err)
	}
	// The reference: walk the elements, numbering bf16 ones, codes and rows.
	kindOf := make([]int, n) // 0 bf16, else the row length
	for _, s := range segs {
		for e := s.Off; e < s.Off+s.Len; e++ {
			kindOf[e] = s.Cols
		}
	}
	wantAt, wantRow := make([]int, n), make([]int, n)
	bf, code, row := 0, 0, 0
	for e := range n {
		if kindOf[e] == 0 {
			wantAt[e], bf = bf, bf+1
			continue
		}
		wantAt[e], code = code, code+1
		wantRow[e] = row
		if code%16 == 0 && (kindOf[e] == 16 || code%32 == 0) { // a row ends
			row++
		}
	}
	if nbf != bf || ncodes != code || nrows != 2+2+1+2 {
		t.Fatalf("sizes: bf16 %d codes %d rows %d, want %d, %d, 7", nbf, ncodes, nrows, bf, code)
	}
	for e := range n {
		r, ok := findRun(runs, e, e+1)
		if !ok {
			t.Fatalf("element %d: in no run", e)
		}
		if r.cols != kindOf[e] || r.at+e-r.lo != wantAt[e] {
			t.Fatalf("element %d: run %+v, want kind %d at %d", e, r, kindOf[e], wantAt[e])
		}
		if r.cols > 0 && r.row+(e-r.lo)/r.cols != wantRow[e] {
			t.Fatalf("element %d: row %d, want %d", e, r.row+(e-r.lo)/r.cols, wantRow[e])
		}
	}
	if len(runs) != 5 {
		t.Errorf("%d runs, want 5 (the two segments of rows of 16 merged): %+v", len(runs), runs)
	}
	if _, ok := findRun(runs, 10, 74); !ok {
		t.Error("the merged FP8 run [10, 74) is not one view")
	}
	for _, r := range [][2]int{{5, 15}, {60, 80}, {100, 108}, {0, n}} {
		if _, ok := findRun(runs, r[0], r[1]); ok {
			t.Errorf("range %v across runs found one", r)
		}
	}
	for _, c := range []struct {
		segs []tensor.Segment
		want string
	}{
		{[]tensor.Segment{seg(0, 32, 16), seg(16, 32, 16)}, "overlapping"},
		{[]tensor.Segment{seg(0, 30, 15)}, "multiple of 16"},
		{[]tensor.Segment{seg(0, 40, 16)}, "whole rows"},
		{[]tensor.Segment{seg(130, 32, 16)}, "outside"},
	} {
		if _, _, _, _, err := frozenPlan(n, c.segs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("segments %v: error %v, want one saying %q", c.segs, err, c.want)
		}
	}
}

// seg returns the segment [off, off+n) of rows of cols.
func seg(off, n, cols int) tensor.Segment { return tensor.Segment{Off: off, Len: n, Cols: cols} }
