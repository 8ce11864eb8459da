package backendtest

import (
	"dflash/tensor"
)

// linearAddOp is LinearAdd(x, W, b, res) into a new output.
func linearAddOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] {
	return tp.LinearAdd(in[0], in[1], in[2], in[3], nil)
}

// linearAddSelfOp is x + x·Wᵀ for a square W: x is the product's input
// and its residual, so that its gradient has two parts.
func linearAddSelfOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] {
	return tp.LinearAdd(in[0], in[1], nil, in[0], nil)
}

// linearAddIntoOp writes res + x·Wᵀ into a buffer of the caller's, then
// scales it (the gradient flows back through the buffer).
func linearAddIntoOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] {
	out := tensor.FromStorage("out", tp.Backend().Alloc(in[2].Numel()), in[2].Shape...)
	return tp.Scale(tp.LinearAdd(in[0], in[1], nil, in[2], out), 0.5)
}

// mlpResidualOp is a residual block's MLP half: x + MLP(RMSNorm(x)), the
// residual x read by the norm too.
func mlpResidualOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] {
	return tp.MLP(tp.RMSNorm(in[0], in[1], 1e-6), in[2], in[3], in[0], nil)
}

// plus returns a + b elementwise, in a new slice.
func plus(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}

// residualCases: products with a residual added by the GEMM itself
// (LinearAdd, MLP with res), the residual also read elsewhere.
func (l *caseList) residualCases() {
	l.add("LinearAdd", []input{
		{name: "x", shape: []int{2, 3, 7}, grad: true},
		{name: "w", shape: []int{5, 7}, grad: true},
		{name: "b", shape: []int{5}, grad: true},
		{name: "res", shape: []int{2, 3, 5}, grad: true}},
		linearAddOp[float32], linearAddOp[float64],
		func(in [][]float64) []float64 { return plus(naiveLinear(6, 7, 5)(in[:3]), in[3]) })
	l.add("LinearAddSelf", []input{
		{name: "x", shape: []int{4, 6}, grad: true},
		{name: "w", shape: []int{6, 6}, grad: true}},
		linearAddSelfOp[float32], linearAddSelfOp[float64],
		func(in [][]float64) []float64 { return plus(naiveLinear(4, 6, 6)(in), in[0]) })
	l.add("LinearAddInto", []input{
		{name: "x", shape: []int{5, 3}, grad: true},
		{name: "w", shape: []int{4, 3}, grad: true},
		{name: "res", shape: []int{5, 4}, grad: true}},
		linearAddIntoOp[float32], linearAddIntoOp[float64],
		func(in [][]float64) []float64 {
			y := plus(naiveLinear(5, 3, 4)(in[:2]), in[2])
			for i := range y {
				y[i] *= 0.5
			}
			return y
		})
	l.add("MLPResidual", []input{
		{name: "x", shape: []int{3, 8}, grad: true},
		{name: "norm", shape: []int{8}, grad: true, gen: l.near1},
		{name: "gate+up", shape: []int{24, 8}, grad: true},
		{name: "down", shape: []int{8, 12}, grad: true}},
		mlpResidualOp[float32], mlpResidualOp[float64],
		func(in [][]float64) []float64 { return plus(naiveNormMLP(in), in[0]) })
}
