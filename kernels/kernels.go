// Package kernels holds the hand-written CUDA C sources of dflash, embedded
// in the binary and compiled at run time by the kernel cache (package jit).
//
// Kernels are extern "C" so their names need no mangling. Names lists the
// .cu files; Source also serves the .cuh headers. A plain kernel (saxpy.cu,
// the op_*.cu files) builds on its own with `nvcc -arch=sm_90 -Xptxas -v -c
// kernels/NAME.cu`, so registers, spills and SASS can be read; the op_*.cu
// files take their storage type and block shapes as -D options, which
// package tensor/tensorcuda passes and each file's header names (they
// #error without them). The flex
// attention templates (flex_*.cu, flex_*.cuh) are completed by package
// flex/flexcuda, which prepends every specialisation and tile constant (the
// templates #error without them), inlines the headers and splices in the
// mask and score programs: the source to hand to nvcc is
// flexcuda.Attention.Sources. The portable kernels (flex_fwd.cu, flex_bwd.cu)
// run from sm_80, the Hopper ones (flex_fwd_ws.cu, flex_bwd_wg.cuh, with
// flex_wgmma.cuh) need sm_90a.
package kernels

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
)

// The .cu sources and .cuh headers of this folder are embedded, not its
// subfolders: dev/ holds superseded variants for reading (dev/README.md).
// Names lists only the .cu sources.
//
//go:embed *.cu *.cuh
var files embed.FS

// Source returns the text of the named file, e.g. "saxpy.cu". It panics if
// the file does not exist: names are constants in the code that uses them.
func Source(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("kernels: no source %q", name))
	}
	return string(b)
}

// Names lists the embedded .cu sources.
func Names() []string {
	m, _ := fs.Glob(files, "*.cu")
	sort.Strings(m)
	return m
}
