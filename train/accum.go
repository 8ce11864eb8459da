package train

// Accumulator sums micro-batch gradients for a backend whose backward pass overwrites
// Param.Grad instead of adding to it. After each micro-batch's backward call Add;
// after the last, Finish writes (1/n) * sum of the n added gradients into each Grad.
// (Run itself needs no Accumulator when Step adds into Grad.)
type Accumulator struct {
	params []*Param
	sum    [][]float32
	n      int
}

// NewAccumulator returns an Accumulator over params.
func NewAccumulator(params []*Param) *Accumulator {
	checkParams(params, true)
	a := &Accumulator{params: params, sum: make([][]float32, len(params))}
	for i, p := range params {
		a.sum[i] = make([]float32, len(p.Grad))
	}
	return a
}

// Add adds each parameter's current gradient to the running sum.
func (a *Accumulator) Add() {
	for i, p := range a.params {
		s := a.sum[i]
		for j, g := range p.Grad {
			s[j] += g
		}
	}
	a.n++
}

// Finish sets each Grad to the mean of the added gradients and resets the sums.
// With nothing added it leaves the gradients untouched.
func (a *Accumulator) Finish() {
	if a.n == 0 {
		return
	}
	inv := 1 / float32(a.n)
	for i, p := range a.params {
		s := a.sum[i]
		for j := range p.Grad {
			p.Grad[j] = s[j] * inv
			s[j] = 0
		}
	}
	a.n = 0
}
