package flex

import (
	"fmt"
	"math"
	"testing"

	"dflash/dtype"
)

// refBackward is brute-force dense backward in float64; ∂score/∂r comes
// from a central difference of the reference interpreter.
func refBackward(d Dims, q, k, v, dout []float64, c testCase, scale float64) (dq, dk, dv []float64) {
	D := d.HeadDim
	out, lse := refForward(d, q, k, v, c.mask, c.score, c.args, scale)
	dq, dk, dv = make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
	for b := 0; b < d.Batch; b++ {
		for h := 0; h < d.HeadsQ; h++ {
			hk := h / d.Group()
			for i := 0; i < d.LenQ; i++ {
				r := (b*d.HeadsQ+h)*d.LenQ + i
				if math.IsInf(lse[r], -1) {
					continue
				}
				qi, gi, oi := q[r*D:][:D], dout[r*D:][:D], out[r*D:][:D]
				di := 0.0
				for x := range gi {
					di += gi[x] * oi[x]
				}
				for j := 0; j < d.LenKV; j++ {
					if !refMask(c.mask, c.args, b, h, i, j) {
						continue
					}
					kr := (b*d.HeadsKV+hk)*d.LenKV + j
					kj, vj := k[kr*D:][:D], v[kr*D:][:D]
					raw, dp := 0.0, 0.0
					for x := range qi {
						raw += qi[x] * kj[x]
						dp += gi[x] * vj[x]
					}
					raw *= scale
					p := math.Exp(refScore(c.score, c.args, b, h, i, j, raw) - lse[r])
					eps := 1e-6 * math.Max(1, math.Abs(raw))
					deriv := (refScore(c.score, c.args, b, h, i, j, raw+eps) - refScore(c.score, c.args, b, h, i, j, raw-eps)) / (2 * eps)
					ds := p * (dp - di) * deriv
					for x := 0; x < D; x++ {
						dv[kr*D+x] += p * gi[x]
						dq[r*D+x] += scale * ds * kj[x]
						dk[kr*D+x] += scale * ds * qi[x]
					}
				}
			}
		}
	}
	return
}

// TestBackwardMatchesReference compares Backward (float64 and float32)
// with brute-force dense backward on random problems, DFlash masks over
// packed rows among them.
func TestBackwardMatchesReference(t *testing.T) {
	forRandProblems(t, newRand(t), 50, 20, 60, func(t *testing.T, c testCase, p problem) {
		d := c.d
		wq, wk, wv := refBackward(d, p.q, p.k, p.v, p.dout, c, p.scale)
		want := [3][]float64{wq, wk, wv}
		out, lse := Forward(d, p.q, p.k, p.v, p.bm, c.score, c.args, p.scale)
		g := Backward(d, p.q, p.k, p.v, out, lse, p.dout, p.bm, c.score, c.args, p.scale)
		checkGrads(t, c, "float64", g, want, 1e-6)
		q32, k32, v32 := dtype.Convert[float32](p.q), dtype.Convert[float32](p.k), dtype.Convert[float32](p.v)
		for _, simd := range simdModes() {
			hasAVX2FMA = simd
			o32, l32 := Forward(d, q32, k32, v32, p.bm, c.score, c.args, p.scale)
			g32 := Backward(d, q32, k32, v32, o32, l32, dtype.Convert[float32](p.dout), p.bm, c.score, c.args, p.scale)
			checkGrads(t, c, fmt.Sprintf("float32 (simd %v)", simd), g32, want, 1e-3)
		}
		gd := DenseBackward(d, p.q, p.k, p.v, out, lse, p.dout, c.denseMask(t), c.score, c.args, p.scale)
		checkGrads(t, c, "dense", gd, want, 1e-6)
	})
}

// checkGrads fails t when g's dq, dk or dv differs from want (in that
// order) by more than atol = rtol = tol.
func checkGrads[T elem](t *testing.T, c testCase, label string, g Grads[T], want [3][]float64, tol float64) {
	t.Helper()
	for i, x := range [3][]T{g.DQ, g.DK, g.DV} {
		got := dtype.Convert[float64](x)
		if e, at := maxErr(got, want[i], tol, tol); e > 1 {
			t.Fatalf("%v\n%s %s[%d] = %v, want %v", c, label, [3]string{"dq", "dk", "dv"}[i], at, got[at], want[i][at])
		}
	}
}
