package main

import (
	"strings"
	"testing"

	"dflash/gpu"
	"dflash/internal/meminfo"
)

// TestBenchStepErrors: `dflash bench step` refuses bad input with the flag
// named and refuses the qwen3-8b case of
// issue 13 on a host without the memory for it before allocating.
func TestBenchStepErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--target-config", "qwen2-7b"}, `--target-config "qwen2-7b": unknown`},
		{[]string{"--taps", "1,x"}, `"x" is not an integer: must be a comma-separated list of ints, each >= 0`},
		{[]string{"--taps", "3,30"}, "--taps [3 30]: layer 30 is outside the target's 28 layers"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--profile"}, "--profile times ops on the GPU: it needs --device cuda"},
	}
	const need8b = 160 << 30 // about what the estimate gives for this case
	if avail, ok := meminfo.Available(); ok && avail < need8b {
		cases = append(cases, struct {
			args []string
			want string
		}{[]string{"--target-config", "qwen3-8b", "--seq-len", "3072", "--batch", "4", "--anchors", "512", "--drafter-layers", "5"},
			"target weights 30.5 GiB as float32"})
	}
	for _, c := range cases {
		err := benchStep(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench step %v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}

// TestBenchStepCUDAMissing: without a GPU (or its libraries) --device cuda
// fails with an error that says so, naming the flag.
func TestBenchStepCUDAMissing(t *testing.T) {
	if _, err := gpu.Count(); err == nil {
		t.Skip("a GPU is present: the CUDA step runs (scripts/gpu-train.sh)")
	}
	err := benchStep([]string{"--device", "cuda", "--target-config", "qwen3-0.6b", "--seq-len", "64", "--anchors", "4", "--steps", "1", "--warmup", "0"})
	if err == nil || !strings.HasPrefix(err.Error(), "--device cuda: ") {
		t.Fatalf("--device cuda without a GPU: %v", err)
	}
	t.Log(err)
}
