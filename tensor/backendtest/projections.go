package backendtest

import (
	"math"

	"dflash/tensor"
)

// naiveNormRoPE is NormRoPE in float64 for x of b·n rows (stride values
// apart) of heads·hd values, weight w (nil: no norm), rotary positions pos
// (one per row) and frequencies inv: [b, n, heads, hd], or moved to
// [b, heads, n, hd].
func naiveNormRoPE(x, w []float64, b, n, heads, hd, stride int, pos []int32, inv []float64, move bool) []float64 {
	out := make([]float64, b*n*heads*hd)
	for i := range b {
		for t := range n {
			for h := range heads {
				xh := x[(i*n+t)*stride+h*hd:][:hd]
				z := append([]float64(nil), xh...)
				if w != nil {
					z = naiveRMSNorm(hd, 1e-6)([][]float64{xh, w})
				}
				o := ((i*n+t)*heads + h) * hd
				if move {
					o = ((i*heads+h)*n + t) * hd
				}
				for k := range hd {
					ang := float64(pos[i*n+t]) * inv[k%(hd/2)]
					rot := -z[(k+hd/2)%hd]
					if k >= hd/2 {
						rot = z[k-hd/2]
					}
					out[o+k] = z[k]*math.Cos(ang) + rot*math.Sin(ang)
				}
			}
		}
	}
	return out
}

// projectionsCases: Projections of x by [Wq; Wk; Wv; Wu] in one product, its
// blocks read in place with their rows the product's width apart:
// NormRoPEHeadsCols of q, NormRoPECols of k, ConcatCols of [ctx ; v ; k]
// per batch (ctx a dense input, ColsOf); u is read by nothing (its gradient
// is zero). k's block has two readers, so one writes its gradient and the
// other adds to it: with weights NormRoPE's step adds (ConcatCols runs
// first in the backward pass), without them ConcatCols adds.
func (l *caseList) projectionsCases() {
	const b, n, hid, hd, nh, nkv, nc = 2, 3, 8, 8, 2, 1, 2
	r, err := tensor.NewRope(hd, 10000, nil)
	if err != nil {
		panic(err)
	}
	pos := randIDs(l.rng, b*n, 300)
	inv := naiveInvFreq(hd, 10000, nil)
	widths := []int{nh * hd, nkv * hd, nkv * hd, hd}
	width := 0
	for _, w := range widths {
		width += w
	}
	for _, weight := range []bool{true, false} {
		op := func(tp *tp[float64], in []*ten[float64]) *ten[float64] {
			return projectionsOp(tp, in, r, pos, widths, weight)
		}
		op32 := func(tp *tp[float32], in []*ten[float32]) *ten[float32] {
			return projectionsOp(tp, in, r, pos, widths, weight)
		}
		naive := func(in [][]float64) []float64 {
			y := naiveLinear(b*n, hid, width)(in[:2])
			var qn, kn []float64
			if weight {
				qn, kn = in[3], in[4]
			}
			out := naiveNormRoPE(y, qn, b, n, nh, hd, width, pos, inv, true)
			out = append(out, naiveNormRoPE(y[nh*hd:], kn, b, n, nkv, hd, width, pos, inv, false)...)
			for i := range b {
				out = append(out, in[2][i*nc*nkv*hd:][:nc*nkv*hd]...)
				for _, off := range []int{(nh + nkv) * hd, nh * hd} { // v, then k
					for t := range n {
						out = append(out, y[(i*n+t)*width+off:][:nkv*hd]...)
					}
				}
			}
			return out
		}
		inputs := []input{
			{name: "x", shape: []int{b * n, hid}, grad: true},
			{name: "w", shape: []int{width, hid}, grad: true},
			{name: "ctx", shape: []int{b * nc, nkv * hd}, grad: true}}
		name := "ProjectionsNoWeight"
		if weight {
			inputs = append(inputs, input{name: "qn", shape: []int{hd}, grad: true, gen: l.near1},
				input{name: "kn", shape: []int{hd}, grad: true, gen: l.near1})
			name = "Projections"
		}
		l.add(name, inputs, op32, op, naive)
	}
}

// projectionsOp is projectionsCases' op: q, k and the concatenation,
// flattened and joined.
func projectionsOp[T tensor.Float](tp *tp[T], in []*ten[T], r *tensor.Rope, pos []int32, widths []int, weight bool) *ten[T] {
	var qn, kn *ten[T]
	if weight {
		qn, kn = in[3], in[4]
	}
	table := tensor.Table(tp.Backend(), r, pos)
	cs := tp.Projections(in[0], in[1], widths...)
	batch := 2
	q := tp.NormRoPEHeadsCols(cs[0], batch, qn, 1e-6, table)
	var k, v *ten[T]
	if weight {
		v = tp.ConcatCols(batch, tensor.ColsOf(in[2]), cs[2], cs[1])
		k = tp.NormRoPECols(cs[1], kn, 1e-6, table)
	} else {
		k = tp.NormRoPECols(cs[1], kn, 1e-6, table)
		v = tp.ConcatCols(batch, tensor.ColsOf(in[2]), cs[2], cs[1])
	}
	flat := func(t *ten[T]) *ten[T] { return tp.Reshape(t, t.Numel()) }
	return tp.Concat(0, flat(q), flat(k), flat(v))
}
