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
