package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dflash/gpu"
	"dflash/recipe/decodebench"
)

// TestBenchDecodeErrors: `dflash bench decode` refuses bad input with the
// flag named.
func TestBenchDecodeErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", "qwen2-7b"}, `--target "qwen2-7b": unknown`},
		{[]string{"--context", "0"}, "--context"},
		{[]string{"--context", "40960"}, "--context 40960: with a block of 16"},
		{[]string{"--block-size", "1"}, "--block-size"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		err := benchDecode(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench decode %v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}

// TestBenchDecodeDryRunJSONFile: a dry run at the Qwen3-8B shape writes
// the report to --json-file: three passes with their bytes, the bounds
// at the given peak, the speedups at the bounds.
func TestBenchDecodeDryRunJSONFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decode.json")
	if err := benchDecode([]string{"--device", "cuda", "--target", "qwen3-8b", "--dry-run", "--hbm-peak", "4.8e12", "--json-file", path}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep decodebench.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Phases) != 3 || rep.Target != "qwen3-8b" || rep.WeightDType != "bf16" || len(rep.Speedups) != 3 {
		t.Fatalf("report %+v", rep)
	}
	for _, p := range rep.Phases {
		if !(p.BoundMS > 0) || p.MedianMS != 0 || p.Bytes != p.WeightBytes+p.KVBytes {
			t.Errorf("%s: %+v", p.Name, p)
		}
	}
	for _, s := range rep.Speedups {
		if !(s.Bound > 0) || s.Measured != 0 {
			t.Errorf("speedup %+v", s)
		}
	}
}

// TestBenchDecodeCUDAMissing: without a GPU (or its libraries) --device
// cuda fails with an error that says so, naming the flag.
func TestBenchDecodeCUDAMissing(t *testing.T) {
	if _, err := gpu.Count(); err == nil {
		t.Skip("a GPU is present: the CUDA benchmark runs")
	}
	err := benchDecode([]string{"--device", "cuda", "--target", "qwen3-0.6b", "--context", "16", "--reps", "1", "--warmup", "0"})
	if err == nil || !strings.HasPrefix(err.Error(), "--device cuda: ") {
		t.Fatalf("--device cuda without a GPU: %v", err)
	}
}
