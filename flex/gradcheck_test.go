package flex

import (
	"math"
	"testing"

	"dflash/dtype"
)

// TestGradientFiniteDifferences checks Backward in float64 against central
// differences of L = Σ out·dout for q, k, v and the float tensors the score
// program reads, on small random problems.
func TestGradientFiniteDifferences(t *testing.T) {
	r := newRand(t)
	n := trials(16, 6)
	for i := 0; i < n; i++ {
		c := randCase(r, 9)
		if i%2 == 0 { // make sure score tensors get checked often
			a := c.args
			switch i % 6 {
			case 0:
				a.SetFloatTensor(ALiBiSlopesName, randSlice(r, c.d.HeadsQ), c.d.HeadsQ)
				c.score = ALiBi()
			case 2:
				md := r.IntN(4)
				a.SetFloatTensor(RelBiasName, randSlice(r, c.d.HeadsQ*(2*md+1)), c.d.HeadsQ, 2*md+1)
				c.score = RelativeBias(md)
			default:
				c.score = NewScore("rand", Score().Mul(pF1.At(H()).Abs().Add(F(0.5))).
					Add(pF2.At(H(), Q().Sub(KV()).Abs()).Tanh()).Add(SelectF(Q().Lt(KV()), F(-0.7), pF1.At(KV()))))
			}
		}
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			q, k, v, dout := randQKVO(r, d)
			scale := 0.7
			bm := c.blockMask(t)
			out, lse := Forward(d, q, k, v, bm, c.score, c.args, scale)
			g := Backward(d, q, k, v, out, lse, dout, bm, c.score, c.args, scale)
			loss := func() float64 { return refLoss(d, q, k, v, dout, c.mask, c.score, c.args, scale) }
			check := func(name string, x, got []float64) {
				t.Helper()
				idx := r.Perm(len(x))
				if len(idx) > 30 { // a random sample keeps the test fast
					idx = idx[:30]
				}
				for _, j := range idx {
					old := x[j]
					h := 1e-5 * math.Max(1, math.Abs(old))
					x[j] = old + h
					lp := loss()
					x[j] = old - h
					lm := loss()
					x[j] = old
					want := (lp - lm) / (2 * h)
					if math.IsNaN(got[j]) || math.Abs(got[j]-want) > 1e-6+1e-5*math.Abs(want) {
						t.Fatalf("%v\n%s[%d] = %v, finite difference %v", c, name, j, got[j], want)
					}
				}
			}
			check("dq", q, g.DQ)
			check("dk", k, g.DK)
			check("dv", v, g.DV)
			if c.score != nil {
				for _, p := range c.score.Params() {
					if p.Kind != ParamFloatTensor {
						continue
					}
					tg, ok := g.Tensors[p.Name]
					if !ok {
						t.Fatalf("%v: no gradient for tensor %q", c, p.Name)
					}
					check("d"+p.Name, c.args.FloatTensors[p.Name].Data, tg)
				}
			}
		})
	}
}

// TestFullyMaskedRows checks that rows without an allowed key give out 0,
// lse -Inf and finite gradients, in both precisions.
func TestFullyMaskedRows(t *testing.T) {
	r := newRand(t)
	d := DFlashDims(2, 4, 2, 5, 4, 37, 8)
	anchors := []int32{0, 3, 9, 20, 30, 1, 2, 5, 6, 36}
	a := DFlashArgs(37, anchors, nil, 5, []int32{3, 0}) // batch 1 is all padding
	a.SetFloatTensor(ALiBiSlopesName, ALiBiSlopes(4), 4)
	for _, score := range []*ScoreProgram{nil, ALiBi(), Softcap(2)} {
		bm, err := NewBlockMask(DFlashMask(4), a, d, 8, 16)
		if err != nil {
			t.Fatal(err)
		}
		q, k, v, dout := randQKVO(r, d)
		check := func(name string, xs []float64) {
			for i, x := range xs {
				if math.IsNaN(x) || (math.IsInf(x, 0) && name != "lse") {
					t.Fatalf("%s[%d] = %v", name, i, x)
				}
			}
		}
		for _, f32 := range []bool{false, true} {
			var out, lse []float64
			var g Grads[float64]
			if f32 {
				o, l := Forward(d, dtype.Convert[float32](q), dtype.Convert[float32](k), dtype.Convert[float32](v), bm, score, a, 0.5)
				g32 := Backward(d, dtype.Convert[float32](q), dtype.Convert[float32](k), dtype.Convert[float32](v), o, l, dtype.Convert[float32](dout), bm, score, a, 0.5)
				out, lse = dtype.Convert[float64](o), dtype.Convert[float64](l)
				g = Grads[float64]{DQ: dtype.Convert[float64](g32.DQ), DK: dtype.Convert[float64](g32.DK), DV: dtype.Convert[float64](g32.DV)}
			} else {
				out, lse = Forward(d, q, k, v, bm, score, a, 0.5)
				g = Backward(d, q, k, v, out, lse, dout, bm, score, a, 0.5)
			}
			check("out", out)
			check("lse", lse)
			check("dq", g.DQ)
			check("dk", g.DK)
			check("dv", g.DV)
			for h := 0; h < d.HeadsQ; h++ {
				for i := 0; i < d.LenQ; i++ {
					valid := 3
					if i/4 >= valid {
						r := (0*d.HeadsQ+h)*d.LenQ + i
						if !math.IsInf(lse[r], -1) {
							t.Fatalf("padding row %d: lse %v, want -Inf", i, lse[r])
						}
					}
					r := (1*d.HeadsQ+h)*d.LenQ + i
					if !math.IsInf(lse[r], -1) {
						t.Fatalf("batch 1 row %d: lse %v, want -Inf", i, lse[r])
					}
					for x := 0; x < d.HeadDim; x++ {
						if out[r*d.HeadDim+x] != 0 || g.DQ[r*d.HeadDim+x] != 0 {
							t.Fatalf("batch 1 row %d: out %v dq %v, want 0", i, out[r*d.HeadDim+x], g.DQ[r*d.HeadDim+x])
						}
					}
				}
			}
		}
	}
}
