package tensor_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// TestProjectionsMatchSeparate: q, k and v made by one product over
// Span(Q, K, V) and read in place (NormRoPEHeadsCols, NormRoPECols,
// ConcatCols) equal, value for value, those of separate Linears and dense
// ops on a second arena with the same values, and so do the gradients of
// x and of every parameter for a random upstream gradient.
func TestProjectionsMatchSeparate(t *testing.T) {
	rng := testseed.New(t)
	const b, n, hid, hd, nh, nkv = 2, 3, 8, 4, 2, 1
	declare := func(a *tensor.Arena[float64]) []*tensor.Of[float64] {
		ps := []*tensor.Of[float64]{a.Param("q", nh*hd, hid), a.Param("k", nkv*hd, hid), a.Param("v", nkv*hd, hid), a.Param("qn", hd), a.Param("kn", hd)}
		a.Alloc()
		return ps
	}
	var fused, split tensor.Arena[float64]
	pf, ps := declare(&fused), declare(&split)
	for i := range fused.HostValues() {
		fused.HostValues()[i] = rng.NormFloat64()
	}
	copy(split.HostValues(), fused.HostValues())
	rope, err := tensor.NewRope(hd, 10000, nil)
	if err != nil {
		t.Fatal(err)
	}
	cpu := tensor.NewCPU[float64](2)
	table := tensor.Table(cpu, rope, []int32{3, 1, 4, 1, 5, 9})
	ctx := tensor.New[float64]("ctx", b*2, nkv*hd)
	ctx.FillNormal(rng, 0, 1)
	xSeed, gSeed := rng.Uint64(), rng.Uint64() // the same x and upstream gradient for both runs
	run := func(p []*tensor.Of[float64], fusedOps bool) (out []float64, dx []float64) {
		x := tensor.New[float64]("x", b*n, hid)
		x.FillNormal(rand.New(rand.NewPCG(xSeed, 1)), 0, 1)
		x.RequiresGrad = true
		tp := tensor.NewTape(cpu)
		var q, k, v *tensor.Of[float64]
		if fusedOps {
			c := tp.Projections(x, tensor.Span(p[0], p[1], p[2]), nh*hd, nkv*hd, nkv*hd)
			q = tp.NormRoPEHeadsCols(c[0], b, p[3], 1e-6, table)
			k = tp.NormRoPECols(c[1], p[4], 1e-6, table)
			v = tp.ConcatCols(b, tensor.ColsOf(ctx), c[2])
		} else {
			q = tp.NormRoPEHeads(tp.Reshape(tp.Linear(x, p[0], nil), b, n, nh, hd), p[3], 1e-6, table)
			k = tp.NormRoPE(tp.Linear(x, p[1], nil), p[4], 1e-6, table)
			v = tp.Concat(1, tp.Reshape(ctx, b, 2, nkv*hd), tp.Reshape(tp.Linear(x, p[2], nil), b, n, nkv*hd))
		}
		flat := func(t *tensor.Of[float64]) *tensor.Of[float64] { return tp.Reshape(t, t.Numel()) }
		y := tp.Concat(0, flat(q), flat(k), flat(v))
		g := make([]float64, y.Numel())
		gr := rand.New(rand.NewPCG(gSeed, 2))
		for i := range g {
			g[i] = gr.NormFloat64()
		}
		tp.BackwardFrom(y, tensor.Host[float64](g))
		return slices.Clone(y.Data()), x.Grad()
	}
	fOut, fdx := run(pf, true)
	sOut, sdx := run(ps, false)
	for _, c := range []struct {
		what      string
		got, want []float64
	}{{"values", fOut, sOut}, {"dx", fdx, sdx}, {"parameter gradients", fused.HostGrad(), split.HostGrad()}} {
		for i := range c.want {
			if d := c.got[i] - c.want[i]; d > 1e-12 || d < -1e-12 {
				t.Fatalf("%s[%d]: fused %v, separate %v", c.what, i, c.got[i], c.want[i])
			}
		}
	}
}

// TestProjectionsBadWidths: widths that do not split the weight's rows
// panic with a message naming them.
func TestProjectionsBadWidths(t *testing.T) {
	tp := tensor.NewTape(tensor.NewCPU[float64](1))
	x, w := tensor.New[float64]("x", 2, 3), tensor.New[float64]("w", 5, 3)
	for _, widths := range [][]int{{2, 2}, {5, 0}, {6, -1}} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "do not split weight w[5 3]") {
					t.Errorf("widths %v: panic %v", widths, r)
				}
			}()
			tp.Projections(x, w, widths...)
		}()
	}
}
