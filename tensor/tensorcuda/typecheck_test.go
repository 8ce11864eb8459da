package tensorcuda

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
