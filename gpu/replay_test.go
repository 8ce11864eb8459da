package gpu

import (
	"strings"
	"testing"
)

// TestFirstDiffNamesTheWord: the description of two recorded runs points
// at the first call and signature word that differ.
func TestFirstDiffNamesTheWord(t *testing.T) {
	gemm := func(words ...uint64) recCall { return recCall{sig: put([]byte{'g'}, words...)} }
	a := []recCall{gemm(1, 2, 3), gemm(4, 5, 6), {sig: put([]byte{'m'}, 9)}}
	for _, c := range []struct {
		b    []recCall
		want string
	}{
		{[]recCall{gemm(1, 2, 3), gemm(4, 5, 6), {sig: put([]byte{'m'}, 9)}}, ""},
		{[]recCall{gemm(1, 2, 3), gemm(4, 7, 6), {sig: put([]byte{'m'}, 9)}}, "call 1 of 3 (GEMM): signature word 1 is 0700000000000000, the graph's 0500000000000000"},
		{[]recCall{gemm(1, 2, 3), {sig: put([]byte{'m'}, 9)}}, "call 1 of 2 (memset): another kind of work"},
		{[]recCall{gemm(1, 2, 3), gemm(4, 5, 6)}, "2 calls, the graph has 3"},
	} {
		got := firstDiff(a, c.b)
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("firstDiff = %q, want %q", got, c.want)
		}
	}
}
