package tensor

import (
	"dflash/internal/avx2"
	"dflash/internal/cpufeat"
)

// hasAVX2FMA selects the AVX2/FMA kernels of package avx2 (see package
// cpufeat).
var hasAVX2FMA = cpufeat.AVX2FMA

// fastKernel returns the AVX2/FMA 6×16 float32 micro-kernel when the CPU has it.
func fastKernel[T Float]() (microKernel[T], bool) {
	if !hasAVX2FMA {
		return microKernel[T]{}, false
	}
	k, ok := any(microKernel[float32]{6, 16, avx2.Gemm6x16}).(microKernel[T])
	return k, ok
}

// fastDot returns the AVX2/FMA float32 dot product when the CPU has it.
func fastDot[T Float]() (func(x, y []T) T, bool) {
	if !hasAVX2FMA {
		return nil, false
	}
	f, ok := any(sdotAVX).(func(x, y []T) T)
	return f, ok
}

// sdotAVX returns Σ x[i]·y[i] (len(y) ≥ len(x)): the first multiple of 32
// elements in assembly, the rest in Go.
func sdotAVX(x, y []float32) float32 {
	y = y[:len(x)]
	n := len(x) &^ 31
	var s float32
	if n > 0 {
		s = avx2.Dot32(x[:n], y[:n])
	}
	return s + dot(x[n:], y[n:])
}

// fastDot4 returns the AVX2/FMA float32 dot4 when the CPU has it.
func fastDot4[T Float]() (func(p []T, stride int, q []T, out *[4]T), bool) {
	if !hasAVX2FMA {
		return nil, false
	}
	f, ok := any(sdot4AVX).(func(p []T, stride int, q []T, out *[4]T))
	return f, ok
}

// sdot4AVX is dot4 with the first multiple of 8 elements in assembly.
func sdot4AVX(p []float32, stride int, q []float32, out *[4]float32) {
	k := len(q)
	_ = p[3*stride+k-1]
	n := k &^ 7
	*out = [4]float32{}
	if n > 0 {
		avx2.Dot4x8(p, stride, q[:n], out)
	}
	if n < k {
		for r := range out {
			out[r] += dot(q[n:], p[r*stride+n:])
		}
	}
}

// fastGemv4 returns the AVX2/FMA float32 gemv4 when the CPU has it.
func fastGemv4[T Float]() (func(k int, a []T, lda int, b []T, ldb, n int, c []T, ldc int), bool) {
	if !hasAVX2FMA {
		return nil, false
	}
	f, ok := any(sgemv4AVX).(func(k int, a []T, lda int, b []T, ldb, n int, c []T, ldc int))
	return f, ok
}

// sgemv4AVX is gemv4 with pairs of rows of b through avx2.Gemm4x2 and an
// odd last row through dot4.
func sgemv4AVX(k int, a []float32, lda int, b []float32, ldb, n int, c []float32, ldc int) {
	if n == 0 {
		return
	}
	_, _, _ = a[3*lda+k-1], b[(n-1)*ldb+k-1], c[3*ldc+n-1]
	even := n &^ 1
	if even > 0 {
		avx2.Gemm4x2(a, lda, b, ldb, k, even/2, c, ldc, 1, false)
	}
	if even < n {
		var out [4]float32
		sdot4AVX(a, lda, b[even*ldb:even*ldb+k], &out)
		for r, v := range out {
			c[r*ldc+even] = v
		}
	}
}
