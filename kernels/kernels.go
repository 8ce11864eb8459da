// Package kernels holds the hand-written CUDA C sources of dflash, embedded
// in the binary and compiled at run time by the kernel cache (package jit).
//
// Each .cu file builds on its own (headers it needs are .cuh files beside
// it) with `nvcc -arch=sm_90 -Xptxas -v -c kernels/NAME.cu` so registers,
// spills and SASS can be read. Kernels are extern "C" so their names need no
// mangling. Names lists the .cu files; Source also serves the .cuh headers.
package kernels

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
)

// Every file of the folder is embedded (a pattern such as *.cuh would break
// the build the day no header is left); Names lists only the .cu sources.
//
//go:embed *
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
