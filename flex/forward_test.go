package flex

import (
	"fmt"
	"testing"

	"dflash/dtype"
)

// simdModes returns the float32 kernel variants to test: the pure-Go one
// and, where the CPU has it, the AVX2/FMA one (restored last).
func simdModes() []bool {
	if hasAVX2FMA {
		return []bool{false, true}
	}
	return []bool{false}
}

// TestForwardMatchesReference compares Forward in float64 and float32 with
// brute-force dense float64 attention on random shapes, programs, block
// sizes and GQA groups, DFlash masks over packed rows among them.
func TestForwardMatchesReference(t *testing.T) {
	forRandProblems(t, newRand(t), 60, 25, 70, func(t *testing.T, c testCase, p problem) {
		d := c.d
		wantO, wantL := refForward(d, p.q, p.k, p.v, c.mask, c.score, c.args, p.scale)
		o64, l64 := Forward(d, p.q, p.k, p.v, p.bm, c.score, c.args, p.scale)
		checkForward(t, c, "float64", o64, l64, wantO, wantL, 1e-10, 1e-9)
		for _, simd := range simdModes() {
			hasAVX2FMA = simd
			o32, l32 := Forward(d, dtype.Convert[float32](p.q), dtype.Convert[float32](p.k), dtype.Convert[float32](p.v), p.bm, c.score, c.args, p.scale)
			checkForward(t, c, fmt.Sprintf("float32 (simd %v)", simd), o32, l32, wantO, wantL, 2e-4, 2e-4)
		}
		od, ld := DenseForward(d, p.q, p.k, p.v, c.denseMask(t), c.score, c.args, p.scale)
		checkForward(t, c, "dense", od, ld, wantO, wantL, 1e-10, 1e-9)
	})
}

// checkForward fails t when out or lse differs from wantO or wantL by more
// than atol + rtol·|want|.
func checkForward[T elem](t *testing.T, c testCase, label string, out, lse []T, wantO, wantL []float64, atol, rtol float64) {
	t.Helper()
	for i, x := range [2][]T{out, lse} {
		got, want := dtype.Convert[float64](x), [2][]float64{wantO, wantL}[i]
		if e, at := maxErr(got, want, atol, rtol); e > 1 {
			t.Fatalf("%v\n%s %s[%d] = %v, want %v", c, label, [2]string{"out", "lse"}[i], at, got[at], want[at])
		}
	}
}
