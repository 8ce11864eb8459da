package main

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"regexp"
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

// TestBadLineHintNamesTheFlag: the flag that a bad line's error tells to use is a
// flag of the command that printed it (data prep's --skip-bad-lines, train's
// --data.skip-bad-lines): given, the bad line is skipped.
func TestBadLineHintNamesTheFlag(t *testing.T) {
	targetDir, dataPath := recipetest.Fixture(t)
	good, err := os.ReadFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, append([]byte("{\"messages\": 3}\n"), good...), 0o644); err != nil {
		t.Fatal(err)
	}
	hint := regexp.MustCompile(`\(use (--\S+) to skip bad lines\)`)
	for _, args := range [][]string{
		{"data", "prep", "--tokenizer", targetDir, "--data", bad, "--out", filepath.Join(dir, "prep"), "--block-size", "4", "--max-len", "400"},
		{"train", "--target", targetDir, "--data", bad, "--out", filepath.Join(dir, "run"), "--steps", "1", "--progress", "off", "--plot=false",
			"--drafter.block-size", "4", "--drafter.anchors", "4", "--data.batch-size", "2", "--data.max-len", "400"},
	} {
		run := func(args []string) string {
			cmd := dflashCommand(t, args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exitCode(t, cmd)
			return stderr.String()
		}
		out := run(args)
		m := hint.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s %s: no hint in\n%s", args[0], args[1], out)
		}
		if again := run(append(args, m[1])); strings.Contains(again, "to skip bad lines") || strings.Contains(again, "not defined") {
			t.Errorf("%s %s: the hint names %s, which does not skip the line:\n%s", args[0], args[1], m[1], again)
		}
	}
}

// TestConfigKeysOfHelp: every flag that train --help lists is, as a key of the
// config file, either an option or refused as a flag only, never "unknown".
func TestConfigKeysOfHelp(t *testing.T) {
	a := &trainArgs{}
	fs, _ := trainFlags(a)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		err := a.opts.DecodeYAML("c.yaml", []byte(f.Name+": 1\n"))
		if err != nil && strings.Contains(err.Error(), "unknown option") {
			t.Errorf("--%s: %v", f.Name, err)
		}
		if !slices.Contains(a.opts.Names(), f.Name) {
			n++
			if err == nil || !strings.Contains(err.Error(), "--"+f.Name+" is a flag only") && !strings.Contains(err.Error(), "--"+f.Name+" itself is a flag only") {
				t.Errorf("--%s in the file: %v, want it named a flag only", f.Name, err)
			}
		}
	})
	if n == 0 {
		t.Fatal("train has no flag-only flags: --target, --data and --config are")
	}
	if err := a.opts.DecodeYAML("c.yaml", []byte("nonsense: 1\n")); err == nil || !strings.Contains(err.Error(), "but for the flags only: --config, --data, --target") {
		t.Fatalf("unknown key: %v", err)
	}
}
