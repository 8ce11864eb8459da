// Package avx2 holds the float32 AVX2/FMA assembly micro-kernels that the
// pure-Go CPU backends of flex and tensor share: dot products of four rows
// against pairs of rows, register-blocked GEMM steps, dot products and the
// vectorised exponential of the softmax.
//
// Callers run them only when cpufeat.AVX2FMA is true (amd64 with AVX2 and
// FMA, DFLASH_NOASM unset) and keep their portable Go kernels for the rest;
// on other architectures every function panics. Each function checks its
// slices' bounds in Go before the assembly runs.
package avx2
