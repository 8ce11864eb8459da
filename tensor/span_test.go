package tensor_test

import (
	"slices"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// TestSpan checks that a Span of adjacent parameters views their values as
// one concatenated tensor, and that a Linear of the Span gives each
// parameter the gradient of separate Linears (computed on a second arena
// with the same values), through the arena's flat gradient.
func TestSpan(t *testing.T) {
	rng := testseed.New(t)
	declare := func(a *tensor.Arena[float64]) (g, u, d *tensor.Of[float64]) {
		a.Param("pre", 2, 3)
		g, u, d = a.Param("gate", 3, 4), a.Param("up", 2, 4), a.Param("down", 4, 2)
		a.Param("post", 5)
		a.Alloc()
		return g, u, d
	}
	var fused, split tensor.Arena[float64]
	g, u, d := declare(&fused)
	g2, u2, _ := declare(&split)
	for i := range fused.HostValues() {
		fused.HostValues()[i] = rng.NormFloat64()
	}
	copy(split.HostValues(), fused.HostValues())

	s := tensor.Span(g, u)
	if !slices.Equal(s.Shape, []int{5, 4}) || !slices.Equal(s.Data(), append(slices.Clone(g.Data()), u.Data()...)) || !s.RequiresGrad {
		t.Fatalf("Span(gate, up) = %v %v, want [5 4] and the values of both", s, s.Data())
	}
	x := tensor.New[float64]("x", 6, 4)
	x.FillNormal(rng, 0, 1)
	dy := make([]float64, 6*5)
	for i := range dy {
		dy[i] = rng.NormFloat64()
	}
	b := tensor.NewCPU[float64](1)
	tp := tensor.NewTape[float64](b)
	y := tp.Linear(x, s, nil)
	tp.BackwardFrom(y, tensor.Host[float64](dy))

	tp2 := tensor.NewTape[float64](b)
	yg, yu := tp2.Linear(x, g2, nil), tp2.Linear(x, u2, nil)
	tp2.BackwardFrom(tp2.Concat(1, yg, yu), tensor.Host[float64](dy))
	for r := range 6 {
		want := append(slices.Clone(yg.Data()[r*3:r*3+3]), yu.Data()[r*2:r*2+2]...)
		for c, w := range want {
			if got := y.Data()[r*5+c]; abs(got-w) > 1e-12 {
				t.Fatalf("y[%d,%d] = %g, want %g", r, c, got, w)
			}
		}
	}
	for i, w := range split.HostGrad() {
		if got := fused.HostGrad()[i]; abs(got-w) > 1e-12 {
			t.Fatalf("flat gradient [%d] = %g, want %g", i, got, w)
		}
	}
	if !slices.Equal(s.Grad(), fused.HostGrad()[6:6+20]) || !slices.Equal(g.Grad(), fused.HostGrad()[6:18]) {
		t.Fatalf("the Span's gradient is not its range of the flat gradient")
	}

	mustPanic(t, "out of order", func() { tensor.Span(u, g) })
	mustPanic(t, "not adjacent", func() { tensor.Span(g, d) })
	mustPanic(t, "other shapes", func() { tensor.Span(u, d) })
	mustPanic(t, "other arena", func() { tensor.Span(g, u2) })
	mustPanic(t, "not a parameter", func() { tensor.Span(x) })
	var late tensor.Arena[float64]
	p, q := late.Param("p", 1, 2), late.Param("q", 1, 2)
	mustPanic(t, "before Alloc", func() { tensor.Span(p, q) })
}
