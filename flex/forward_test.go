package flex

import (
	"math"
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
	r := newRand(t)
	n := trials(60, 25)
	for i := 0; i < n; i++ {
		c := randCase(r, 70)
		if i%10 == 0 { // one case in ten at least: DFlash rows packed with conversations
			c = randDFlashCase(r, 70, 2+r.IntN(3))
		}
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			q, k, v, _ := randQKVO(r, d)
			scale := 1 / math.Sqrt(float64(d.HeadDim))
			bm := c.blockMask(t)
			wantO, wantL := refForward(d, q, k, v, c.mask, c.score, c.args, scale)
			o64, l64 := Forward(d, q, k, v, bm, c.score, c.args, scale)
			if e, at := maxErr(o64, wantO, 1e-10, 1e-9); e > 1 {
				t.Fatalf("%v\nfloat64 out[%d] = %v, want %v", c, at, o64[at], wantO[at])
			}
			if e, at := maxErr(l64, wantL, 1e-10, 1e-9); e > 1 {
				t.Fatalf("%v\nfloat64 lse[%d] = %v, want %v", c, at, l64[at], wantL[at])
			}
			for _, simd := range simdModes() {
				hasAVX2FMA = simd
				o32, l32 := Forward(d, dtype.Convert[float32](q), dtype.Convert[float32](k), dtype.Convert[float32](v), bm, c.score, c.args, scale)
				if e, at := maxErr(dtype.Convert[float64](o32), wantO, 2e-4, 2e-4); e > 1 {
					t.Fatalf("%v\nfloat32 (simd %v) out[%d] = %v, want %v", c, simd, at, o32[at], wantO[at])
				}
				if e, at := maxErr(dtype.Convert[float64](l32), wantL, 2e-4, 2e-4); e > 1 {
					t.Fatalf("%v\nfloat32 (simd %v) lse[%d] = %v, want %v", c, simd, at, l32[at], wantL[at])
				}
			}
			dm, err := NewDenseMask(c.mask, c.args, d, 0)
			if err != nil {
				t.Fatal(err)
			}
			od, ld := DenseForward(d, q, k, v, dm, c.score, c.args, scale)
			if e, at := maxErr(od, wantO, 1e-10, 1e-9); e > 1 {
				t.Fatalf("%v\ndense out[%d] = %v, want %v", c, at, od[at], wantO[at])
			}
			if e, at := maxErr(ld, wantL, 1e-10, 1e-9); e > 1 {
				t.Fatalf("%v\ndense lse[%d] = %v, want %v", c, at, ld[at], wantL[at])
			}
		})
	}
}
