//go:build amd64

package tensor

//go:noescape
func sdot32(n int, x, y *float32) float32

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
		s = sdot32(n, &x[0], &y[0])
	}
	return s + dot(x[n:], y[n:])
}

//go:noescape
func sdot4x8(n int, p *float32, stride int, q *float32, out *float32)

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
		sdot4x8(n, &p[0], stride, &q[0], &out[0])
	}
	if n < k {
		for r := range out {
			out[r] += dot(q[n:], p[r*stride+n:])
		}
	}
}

//go:noescape
func sgemv4x2(k int, a *float32, lda int, b *float32, ldb int, n int, c *float32, ldc int)

// fastGemv4 returns the AVX2/FMA float32 gemv4 when the CPU has it.
func fastGemv4[T Float]() (func(k int, a []T, lda int, b []T, ldb, n int, c []T, ldc int), bool) {
	if !hasAVX2FMA {
		return nil, false
	}
	f, ok := any(sgemv4AVX).(func(k int, a []T, lda int, b []T, ldb, n int, c []T, ldc int))
	return f, ok
}

// sgemv4AVX is gemv4 with pairs of rows of b in assembly (k a multiple of
// 8) and the rest through dot4.
func sgemv4AVX(k int, a []float32, lda int, b []float32, ldb, n int, c []float32, ldc int) {
	if n == 0 {
		return
	}
	_, _, _ = a[3*lda+k-1], b[(n-1)*ldb+k-1], c[3*ldc+n-1]
	even := n &^ 1
	if k%8 != 0 {
		even = 0
	}
	if even > 0 {
		sgemv4x2(k, &a[0], lda, &b[0], ldb, even, &c[0], ldc)
	}
	var out [4]float32
	for j := even; j < n; j++ {
		sdot4AVX(a, lda, b[j*ldb:j*ldb+k], &out)
		for r, v := range out {
			c[r*ldc+j] = v
		}
	}
}
