package demo

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"

	"dflash/internal/testseed"
)

// naiveBPE recounts every pair of every word at every step: the brute-force
// reference of TrainBPE.
func naiveBPE(t *testing.T, docs []string, nMerges int) [][2]int32 {
	t.Helper()
	re := regexp2.MustCompile(SplitPattern, regexp2.Unicode)
	counts := map[string]int{}
	for _, d := range docs {
		ws, err := splitWords(re, d)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			counts[w]++
		}
	}
	var words [][]int32
	var freq []int
	for w, n := range counts {
		s := make([]int32, len(w))
		for i := 0; i < len(w); i++ {
			s[i] = int32(w[i])
		}
		words = append(words, s)
		freq = append(freq, n)
	}
	var merges [][2]int32
	next := int32(256)
	for len(merges) < nMerges {
		pc := map[[2]int32]int{}
		for wi, w := range words {
			for i := 0; i+1 < len(w); i++ {
				pc[[2]int32{w[i], w[i+1]}] += freq[wi]
			}
		}
		var best [2]int32
		bn := 0
		for p, n := range pc {
			if n > bn || (n == bn && (p[0] < best[0] || (p[0] == best[0] && p[1] < best[1]))) {
				best, bn = p, n
			}
		}
		if bn < 2 {
			break
		}
		merges = append(merges, best)
		for wi, w := range words {
			var nw []int32
			for i := 0; i < len(w); i++ {
				if i+1 < len(w) && w[i] == best[0] && w[i+1] == best[1] {
					nw = append(nw, next)
					i++
				} else {
					nw = append(nw, w[i])
				}
			}
			words[wi] = nw
		}
		next++
	}
	return merges
}

func randomCodeLike(r *rand.Rand, n int) string {
	vocab := []string{"func", " main", "(", ")", " {", "\n\t", "return", " err", " != ", "nil", "\n", "}", " x", " :=", " 0", "1", "2", "aaaa", "aa", " ", "  ", "é", "世界", "'s", "// comment"}
	var sb strings.Builder
	for i := 0; i < n; i++ {
		sb.WriteString(vocab[r.IntN(len(vocab))])
	}
	return sb.String()
}

func TestTrainBPEMatchesNaive(t *testing.T) {
	r := testseed.New(t)
	var docs []string
	for i := 0; i < 20; i++ {
		docs = append(docs, randomCodeLike(r, 200))
	}
	const nMerges = 60
	b, err := TrainBPE(docs, BPEOptions{VocabSize: 256 + nMerges + len(DemoSpecials), Specials: DemoSpecials})
	if err != nil {
		t.Fatal(err)
	}
	want := naiveBPE(t, docs, nMerges)
	if len(b.Merges) != len(want) {
		t.Fatalf("got %d merges, naive reference %d", len(b.Merges), len(want))
	}
	for i := range want {
		if b.Merges[i] != want[i] {
			t.Fatalf("merge %d: got %v (%q+%q), want %v", i, b.Merges[i], b.Tokens[b.Merges[i][0]], b.Tokens[b.Merges[i][1]], want[i])
		}
	}
	if id, ok := b.SpecialID(TokMask); !ok || id != 256+nMerges+3 {
		t.Fatalf("mask id %d %v", id, ok)
	}
}

func TestGoCorpusDeterministic(t *testing.T) {
	a, err := GoCorpus(CorpusOptions{MaxBytes: 300 << 10})
	if err != nil {
		t.Fatal(err)
	}
	b, err := GoCorpus(CorpusOptions{MaxBytes: 300 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) || len(a) < 5 {
		t.Fatalf("corpus sizes %d and %d", len(a), len(b))
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Text != b[i].Text {
			t.Fatalf("document %d differs: %s vs %s", i, a[i].Name, b[i].Name)
		}
	}
	if n := TotalBytes(a); n > 300<<10 || n < 200<<10 {
		t.Fatalf("corpus has %d bytes, want about %d", n, 300<<10)
	}
	for _, d := range a {
		if strings.HasSuffix(d.Name, "_test.go") || strings.Contains(d.Name, "testdata/") {
			t.Fatalf("unwanted file %s", d.Name)
		}
	}
}
