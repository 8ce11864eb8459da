//go:build !amd64

package tensor

func fastDot[T Float]() (func(x, y []T) T, bool) { return nil, false }

func fastDot4[T Float]() (func(p []T, stride int, q []T, out *[4]T), bool) { return nil, false }

func fastGemv4[T Float]() (func(k int, a []T, lda int, b []T, ldb, n int, c []T, ldc int), bool) {
	return nil, false
}
