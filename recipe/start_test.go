package recipe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"dflash/recipe"
	"dflash/safetensors"
)

// TestStartLine: a run logs one "start" line, at its first step, whose
// parts (Run's prepare, the target's load, the kernels, the drafter's
// placement, the first step) fit within the time from the process's start
// to that step, with the target's bytes and the readers that read them.
func TestStartLine(t *testing.T) {
	var buf bytes.Buffer
	saved := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, nil)))
	defer slog.SetDefault(saved)
	s := tinySpec(t)
	if _, err := recipe.Run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(l, &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if rec["msg"] == "start" {
			lines = append(lines, rec)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d start lines, want 1 (a run of %d steps)", len(lines), s.Steps)
	}
	l := lines[0]
	f := func(k string) float64 {
		v, ok := l[k].(float64)
		if !ok {
			t.Fatalf("start line %v lacks %s", l, k)
		}
		return v
	}
	parts := f("prepare_s") + f("device_s") + f("target_s") + f("kernels_s") + f("drafter_s") + f("first_step_s")
	if at := f("first_step_at_s"); at <= 0 || parts > at+0.01 { // each part rounded to a millisecond
		t.Errorf("the parts add up to %.3f s, more than the %.3f s from the start to the first step", parts, at)
	}
	w, err := safetensors.OpenDir(s.TargetDir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var size int64 // every tensor of the fixture is a weight its target uses
	for _, n := range w.Names() {
		b, err := w.Bytes(n)
		if err != nil {
			t.Fatal(err)
		}
		size += int64(len(b))
	}
	if f("target_bytes") != float64(size) || f("readers") < 1 || f("first_step_s") <= 0 {
		t.Errorf("start line %v: want %d target bytes, readers and a first step", l, size)
	}
}
