package tensorcuda

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"dflash/internal/testseed"
)

// TestOpKernelsTypeCheck compiles every tensor-op kernel file, as the
// device compiles it (Source: op_common.cuh spliced in), with g++
// -fsyntax-only against host stand-ins for the CUDA builtins, in both
// storage dtypes: a syntax or type error in a kernel shows here, without a
// GPU, instead of at the first device call. It skips without g++.
func TestOpKernelsTypeCheck(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++")
	}
	stub, err := filepath.Abs(filepath.Join("testdata", "cuda_host_stub.h"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for _, k := range allKernels {
		files[k.file] = true
	}
	for f := range files {
		for _, bf := range []string{"0", "1"} {
			cmd := exec.Command("g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wno-unknown-pragmas", "-Wno-unused-function",
				"-x", "c++", "-include", stub, "-DOP_BF16="+bf, "-")
			// The spliced header's #pragma once is in the main file here.
			cmd.Stdin = strings.NewReader(strings.ReplaceAll(Source(f), "#pragma once", ""))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil || out.Len() > 0 {
				t.Errorf("%s (OP_BF16=%s): g++: %v\n%s", f, bf, err, out.String())
			}
		}
	}
}

// TestOpCopyKernelsOnHost builds kernels/op_copy.cu (as the device compiles
// it) with testdata/op_copy_host.cc and runs it on the host, in both
// storage dtypes: op_udiv against the division it replaces, and op_copy2d
// and op_transpose12, their vector and scalar paths and accumulate forms,
// against plain loops (the harness runs each thread of a small grid in
// turn, which is exact for these barrier-free kernels). The 64-bit index
// path (2³¹ elements and more) is left to the GPU tests' reading of the
// code: it differs only in its index type. It skips without g++.
func TestOpCopyKernelsOnHost(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++")
	}
	seed := testseed.Seed(t)
	td, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	harness, err := os.ReadFile(filepath.Join(td, "op_copy_host.cc"))
	if err != nil {
		t.Fatal(err)
	}
	src := strings.ReplaceAll(Source("op_copy.cu"), "#pragma once", "") + "\n" + string(harness)
	for _, bf := range []string{"0", "1"} {
		bin := filepath.Join(t.TempDir(), "op_copy_host")
		cmd := exec.Command("g++", "-std=c++17", "-O1", "-fno-strict-aliasing", "-Wall", "-Wno-unknown-pragmas",
			"-Wno-unused-function", "-x", "c++", "-include", filepath.Join(td, "cuda_host_stub.h"),
			"-DOP_BF16="+bf, fmt.Sprintf("-DSEED=%dull", seed), "-o", bin, "-")
		cmd.Stdin = strings.NewReader(src)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Fatalf("OP_BF16=%s: g++: %v\n%s", bf, err, out)
		}
		out, err := exec.Command(bin).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "ok ") {
			t.Errorf("OP_BF16=%s: %v\n%s", bf, err, out)
			continue
		}
		t.Logf("OP_BF16=%s: %s", bf, strings.TrimSpace(string(out)))
	}
}
