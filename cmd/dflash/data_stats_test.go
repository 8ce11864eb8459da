package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"dflash/data"
	"dflash/data/bucket"
	"dflash/data/pack"
	"dflash/recipe/recipetest"
)

// TestDataStatsBuckets: data stats --buckets N reports at most N buckets
// whose padded tokens are those of the sample lengths padded to the chosen
// lengths, in JSON and in the table, and refuses a negative count.
func TestDataStatsBuckets(t *testing.T) {
	targetDir, dataPath := recipetest.Fixture(t)
	prep := filepath.Join(t.TempDir(), "prep")
	if err := dataPrep([]string{"--tokenizer", targetDir, "--data", dataPath, "--out", prep, "--block-size", "4", "--max-len", "400"}); err != nil {
		t.Fatal(err)
	}
	d, err := data.Open(prep)
	if err != nil {
		t.Fatal(err)
	}
	lengths := d.Lengths()
	d.Close()
	raw, err := dflashCommand(t, "data", "stats", "--json", "--edge", "64", "--buckets", "2", prep).Output()
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Buckets bucket.Report `json:"buckets"`
		Packed  pack.Report   `json:"packed"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	r := st.Buckets
	var lens []int
	for _, b := range r.Buckets {
		lens = append(lens, b.Len)
	}
	want, ok := bucket.PaddedTokens(lengths, lens)
	if len(lens) != 2 || !ok || r.Padded != want || r.Samples != len(lengths) {
		t.Fatalf("buckets %v: %d samples padded to %d tokens; want %d samples, %d tokens", lens, r.Samples, r.Padded, len(lengths), want)
	}
	if best, _ := bucket.ChooseLens(lengths, 64, 2); best[0] != lens[0] || best[1] != lens[1] {
		t.Fatalf("buckets %v, ChooseLens %v", lens, best)
	}
	// Packed: the samples' tokens over rows of the longest length rounded
	// up to the edge, all of them packed.
	p := st.Packed
	var tokens int64
	for _, l := range lengths {
		tokens += int64(l)
	}
	if p.Samples != len(lengths) || p.Tokens != tokens || p.RowLen != bucket.RoundUp(slices.Max(lengths), 64) ||
		math.Abs(p.Waste-(1-float64(tokens)/float64(p.Rows*p.RowLen))) > 1e-12 || p.Rows%4 != 0 {
		t.Fatalf("packed report %+v for %d samples of %d tokens", p, len(lengths), tokens)
	}
	text, err := dflashCommand(t, "data", "stats", "--edge", "64", "--buckets", "2", prep).Output()
	if err != nil || !strings.Contains(string(text), "2 buckets (edge 64") || !strings.Contains(string(text), "padding waste") ||
		!strings.Contains(string(text), "packed rows of") {
		t.Fatalf("%v:\n%s", err, text)
	}
	if err := dataStats([]string{"--buckets=-1", prep}); err == nil || !strings.Contains(err.Error(), "--buckets -1: must be an int >= 0") {
		t.Fatalf("--buckets -1: %v", err)
	}
}
