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
