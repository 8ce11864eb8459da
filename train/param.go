package train

import (
	"fmt"
	"strings"
)

// Param is one trainable tensor. The model reads Data and adds its gradient into Grad
// (same length as Data).
type Param struct {
	Name  string
	Shape []int
	Data  []float32
	Grad  []float32
	// NoDecay excludes the parameter from weight decay whatever its name.
	NoDecay bool
}

// NewParam returns a zero-valued parameter with a gradient buffer.
func NewParam(name string, shape ...int) *Param {
	n := numel(shape)
	return &Param{Name: name, Shape: shape, Data: make([]float32, n), Grad: make([]float32, n)}
}

// Numel returns the number of elements, the product of Shape.
func (p *Param) Numel() int { return numel(p.Shape) }

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// checkParams panics unless names are unique and non-empty and Data and
// Grad match Shape (Grad may be nil without grads).
func checkParams(params []*Param, grads bool) {
	seen := map[string]bool{}
	for _, p := range params {
		if p.Name == "" {
			panic("train: parameter with an empty name")
		}
		if seen[p.Name] {
			panic(fmt.Sprintf("train: parameter %q appears twice", p.Name))
		}
		seen[p.Name] = true
		if n := p.Numel(); len(p.Data) != n || (grads || p.Grad != nil) && len(p.Grad) != n {
			panic(fmt.Sprintf("train: parameter %q: shape %v has %d elements, Data %d, Grad %d", p.Name, p.Shape, n, len(p.Data), len(p.Grad)))
		}
	}
}

// ZeroGrads sets every gradient to zero.
func ZeroGrads(params []*Param) {
	for _, p := range params {
		clear(p.Grad)
	}
}

// ScaleGrads multiplies every gradient by s.
func ScaleGrads(params []*Param, s float32) {
	for _, p := range params {
		for i := range p.Grad {
			p.Grad[i] *= s
		}
	}
}

// DefaultNoDecay reports whether p takes no weight decay: when p.NoDecay is set, p is a
// scalar or vector (biases, norm scales), its name ends in "bias", or its name contains
// "norm" (any case; RMSNorm/LayerNorm weights).
func DefaultNoDecay(p *Param) bool {
	name := strings.ToLower(p.Name)
	return p.NoDecay || len(p.Shape) <= 1 || strings.HasSuffix(name, "bias") || strings.Contains(name, "norm")
}
