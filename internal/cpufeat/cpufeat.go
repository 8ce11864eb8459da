// Package cpufeat decides once per process which CPU fast paths dflash's
// pure-Go backend may use. flex and tensor call the assembly kernels of
// internal/avx2 only when AVX2FMA is true; otherwise their portable Go
// kernels run.
package cpufeat

import (
	"golang.org/x/sys/cpu"

	"dflash/internal/switches"
)

// AVX2FMA reports whether the CPU and the operating system support AVX2 and
// FMA, the build is for amd64, and DFLASH_NOASM is not on (on forces the
// portable kernels, for tests and comparisons). A DFLASH_NOASM that is not a
// boolean panics at initialisation, naming the variable.
var AVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA && !switches.NoASM.MustValue()
