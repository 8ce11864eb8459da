package tensorcuda

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"dflash/dtype"
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
		for _, dt := range []dtype.DType{dtype.F32, dtype.BF16} {
			bf := compileOptions(dt)[1]
			args := append([]string{"-fsyntax-only", "-Wall", "-Wno-unknown-pragmas", "-Wno-unused-function",
				"-x", "c++", "-include", stub}, compileOptions(dt)...)
			cmd := exec.Command("g++", append(args, "-")...)
			// The spliced header's #pragma once is in the main file here.
			cmd.Stdin = strings.NewReader(strings.ReplaceAll(Source(f), "#pragma once", ""))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil || out.Len() > 0 {
				t.Errorf("%s (%s): g++: %v\n%s", f, bf, err, out.String())
			}
		}
	}
}

// TestOpKernelsOnHost builds kernel files (as the device compiles them)
// with a harness of testdata and runs them on the host, in both storage
// dtypes; each harness runs every thread of small grids in turn, which is
// exact for kernels without barriers or shuffles, or a block's threads
// together (host_grid.h's block_together, with __syncthreads and
// __shfl_xor_sync among them) for kernels with:
//   - op_copy_host.cc: op_udiv against the division it replaces; op_copy2d
//     and op_transpose12, vector and scalar paths, accumulate forms,
//     against plain loops. Their 64-bit index path (2³¹ elements and more)
//     differs only in its index type and is not run.
//   - op_rmsnorm_host.cc: the small-dim RMSNorm kernels with one lane per
//     row, and the backward's block kernels (dx; dx and dw fused; dw's
//     vector and scalar paths), against float64 and, where they add the
//     same terms in the same order, against each other bit for bit.
//   - op_ew_host.cc: op_add, vector, scalar and in-place, against a plain
//     loop.
//   - op_norm_rope_host.cc: the fused QK-norm + RoPE + head move kernels
//     (forward, dx written and accumulated, dw chunks), with and without a
//     weight, one lane per head row, against float64.
//   - op_swiglu_host.cc: the packed SwiGLU kernels (forward; backward
//     accumulated, written and in place), vector and scalar paths, bit for
//     bit against the unfused kernels on the halves copied apart.
//
// It skips without g++.
func TestOpKernelsOnHost(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++")
	}
	seed := testseed.Seed(t)
	td, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ kernels, harness string }{{"op_copy.cu", "op_copy_host.cc"}, {"op_rmsnorm.cu", "op_rmsnorm_host.cc"}, {"op_ew.cu", "op_ew_host.cc"},
		{"op_norm_rope.cu", "op_norm_rope_host.cc"}, {"op_swiglu.cu", "op_swiglu_host.cc"}} {
		harness, err := os.ReadFile(filepath.Join(td, c.harness))
		if err != nil {
			t.Fatal(err)
		}
		src := strings.ReplaceAll(Source(c.kernels), "#pragma once", "") + "\n" + string(harness)
		for _, dt := range []dtype.DType{dtype.F32, dtype.BF16} {
			bf := compileOptions(dt)[1]
			bin := filepath.Join(t.TempDir(), "host")
			// The kernels' -D options, after which -std=c++20 (the harnesses') wins over their -std.
			args := append(compileOptions(dt), "-std=c++20", "-pthread", "-O1", "-fno-strict-aliasing", "-Wall", "-Wno-unknown-pragmas",
				"-Wno-unused-function", "-x", "c++", "-include", filepath.Join(td, "cuda_host_stub.h"), "-I", td,
				fmt.Sprintf("-DSEED=%dull", seed), "-o", bin, "-")
			cmd := exec.Command("g++", args...)
			cmd.Stdin = strings.NewReader(src)
			if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
				t.Fatalf("%s (%s): g++: %v\n%s", c.harness, bf, err, out)
			}
			out, err := exec.Command(bin).CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "ok ") {
				t.Errorf("%s (%s): %v\n%s", c.harness, bf, err, out)
				continue
			}
			t.Logf("%s (%s): %s", c.harness, bf, strings.TrimSpace(string(out)))
		}
	}
}
