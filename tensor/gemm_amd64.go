//go:build amd64

package tensor

import "os"

//go:noescape
func sgemm6x16(k int, ap, bp, c *float32, ldc int, alpha float32)

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

func xgetbv0() (eax uint32)

// hasAVX2FMA reports whether the CPU and OS support AVX2 and FMA (and the
// environment does not set DFLASH_NOASM).
var hasAVX2FMA = func() bool {
	if os.Getenv("DFLASH_NOASM") != "" {
		return false
	}
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&fma == 0 || ecx1&osxsave == 0 || ecx1&avx == 0 {
		return false
	}
	if xgetbv0()&6 != 6 { // XMM and YMM state enabled by the OS
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0
}()

// fastKernel returns the AVX2/FMA 6×16 float32 micro-kernel when the CPU has it.
func fastKernel[T Float]() (microKernel[T], bool) {
	if !hasAVX2FMA {
		return microKernel[T]{}, false
	}
	k, ok := any(microKernel[float32]{6, 16, kern6x16}).(microKernel[T])
	return k, ok
}

func kern6x16(k int, ap, bp, c []float32, ldc int, alpha float32) {
	_ = ap[6*k-1]
	_ = bp[16*k-1]
	_ = c[5*ldc+15]
	sgemm6x16(k, &ap[0], &bp[0], &c[0], ldc, alpha)
}
