package main

import (
	"slices"
	"testing"
)

// TestSeveralInputs: data prep and train take several inputs the same way, after
// one --data or with --data repeated, with the other flags before, between or
// after them; other arguments stay arguments (data prep reads them as inputs,
// train refuses them).
func TestSeveralInputs(t *testing.T) {
	for _, c := range []struct {
		args []string
		data []string // what --data holds
		rest []string // the other arguments
	}{
		{[]string{"--data", "a.jsonl", "b.jsonl", "--out", "c"}, []string{"a.jsonl", "b.jsonl"}, nil},
		{[]string{"--out", "c", "--data", "a.jsonl", "b.jsonl"}, []string{"a.jsonl", "b.jsonl"}, nil},
		{[]string{"--data", "a.jsonl", "b.jsonl", "--out", "c", "--force"}, []string{"a.jsonl", "b.jsonl"}, nil},
		{[]string{"--data", "a", "--data", "b", "--out", "c"}, []string{"a", "b"}, nil},
		{[]string{"--data=a", "b", "-data", "c", "d", "--out=c"}, []string{"a", "b", "c", "d"}, nil},
		{[]string{"--force", "x.jsonl", "--data", "a", "--out", "c"}, []string{"a"}, []string{"x.jsonl"}},
		{[]string{"--data", "a", "--out", "c", "y.jsonl"}, []string{"a"}, []string{"y.jsonl"}},
		{[]string{"--out", "c", "--data", "a", "--", "-x.jsonl"}, []string{"a"}, []string{"-x.jsonl"}},
	} {
		o, files, err := parsePrep(append([]string{"--tokenizer", "t"}, c.args...))
		if want := append(slices.Clone(c.data), c.rest...); err != nil || o.Out != "c" || !slices.Equal(files, want) {
			t.Errorf("data prep %q: files %q, --out %q, %v; want files %q", c.args, files, o.Out, err, want)
		}
		if slices.Contains(c.args, "--force") {
			continue // not a train flag
		}
		a, err := parseTrain(append([]string{"--target", "t"}, c.args...))
		switch {
		case c.rest != nil && err == nil:
			t.Errorf("train %q: arguments %q accepted", c.args, c.rest)
		case c.rest == nil && (err != nil || !slices.Equal(a.spec.DataPaths, c.data) || a.spec.Out != "c"):
			t.Errorf("train %q: %+v, %v; want --data %q, --out c", c.args, a, err, c.data)
		}
	}
}
