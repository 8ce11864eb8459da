package flex

import (
	"fmt"
	"testing"

	"dflash/dtype"
)

// headsInner returns x, laid out [batch, heads, len, dim], as [batch, len,
// heads, dim].
func headsInner(x []float64, batch, heads, length, dim int) []float64 {
	y := make([]float64, len(x))
	for b := range batch {
		for h := range heads {
			for i := range length {
				copy(y[((b*length+i)*heads+h)*dim:][:dim], x[((b*heads+h)*length+i)*dim:][:dim])
			}
		}
	}
	return y
}

// TestOutHeadsInner checks Forward and Backward with out and dout laid out
// [Batch, LenQ, HeadsQ, HeadDim] against the brute-force float64 references
// (computed in q's layout and permuted), in float64 and float32, on random
// shapes, programs, block sizes and GQA groups; lse keeps q's layout.
func TestOutHeadsInner(t *testing.T) {
	r := newRand(t)
	forRandProblems(t, r, 40, 15, 50, func(t *testing.T, c testCase, p problem) {
		d, q, k, v := c.d, p.q, p.k, p.v
		di := d
		di.OutHeadsInner = true
		doutI := randSlice(r, len(q)) // dout in di's layout
		perm := func(x []float64) []float64 { return headsInner(x, d.Batch, d.HeadsQ, d.LenQ, d.HeadDim) }
		// back permutes dout to q's layout for the reference: out's
		// rows of one head are LenQ apart in q's layout.
		back := make([]float64, len(q))
		for b := range d.Batch {
			for h := range d.HeadsQ {
				for i := range d.LenQ {
					copy(back[((b*d.HeadsQ+h)*d.LenQ+i)*d.HeadDim:][:d.HeadDim], doutI[((b*d.LenQ+i)*d.HeadsQ+h)*d.HeadDim:][:d.HeadDim])
				}
			}
		}
		refO, refL := refForward(d, q, k, v, c.mask, c.score, c.args, p.scale)
		wantO := perm(refO)
		wq, wk, wv := refBackward(d, q, k, v, back, c, p.scale)
		want := [3][]float64{wq, wk, wv}

		o64, l64 := Forward(di, q, k, v, p.bm, c.score, c.args, p.scale)
		checkForward(t, c, "float64", o64, l64, wantO, refL, 1e-10, 1e-9)
		checkGrads(t, c, "float64", Backward(di, q, k, v, o64, l64, doutI, p.bm, c.score, c.args, p.scale), want, 1e-6)
		for _, simd := range simdModes() {
			hasAVX2FMA = simd
			o32, l32 := Forward(di, dtype.Convert[float32](q), dtype.Convert[float32](k), dtype.Convert[float32](v), p.bm, c.score, c.args, p.scale)
			checkForward(t, c, fmt.Sprintf("float32 (simd %v)", simd), o32, l32, wantO, refL, 2e-4, 2e-4)
			g32 := Backward(di, dtype.Convert[float32](q), dtype.Convert[float32](k), dtype.Convert[float32](v), o32, l32, dtype.Convert[float32](doutI), p.bm, c.score, c.args, p.scale)
			checkGrads(t, c, fmt.Sprintf("float32 (simd %v)", simd), g32, want, 1e-3)
		}
		dm := c.denseMask(t)
		od, ld := DenseForward(di, q, k, v, dm, c.score, c.args, p.scale)
		checkForward(t, c, "dense", od, ld, wantO, refL, 1e-10, 1e-9)
		checkGrads(t, c, "dense", DenseBackward(di, q, k, v, od, ld, doutI, dm, c.score, c.args, p.scale), want, 1e-6)
	})
}

// TestOutRow checks Dims.OutRow and OutStride against the two layouts'
// row-major offsets.
func TestOutRow(t *testing.T) {
	d := Dims{Batch: 2, HeadsQ: 3, HeadsKV: 1, LenQ: 5, LenKV: 4, HeadDim: 4}
	for _, inner := range []bool{false, true} {
		d.OutHeadsInner = inner
		for b := range d.Batch {
			for h := range d.HeadsQ {
				for i := range d.LenQ {
					want := ((b*d.HeadsQ+h)*d.LenQ + i) * 4
					if inner {
						want = ((b*d.LenQ+i)*d.HeadsQ + h) * 4
					}
					if got := d.OutRow(b, h, i); got != want {
						t.Fatalf("inner %v: OutRow(%d, %d, %d) = %d, want %d", inner, b, h, i, got, want)
					}
					if i > 0 && d.OutRow(b, h, i)-d.OutRow(b, h, i-1) != d.OutStride() {
						t.Fatalf("inner %v: OutStride %d, rows %d apart", inner, d.OutStride(), d.OutRow(b, h, i)-d.OutRow(b, h, i-1))
					}
				}
			}
		}
	}
}
