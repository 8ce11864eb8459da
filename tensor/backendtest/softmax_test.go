package backendtest

import (
	"math"
	"testing"
)

// TestSoftmax: softmax of scores whose exponentials are known exactly (1, 2
// and 4 times e^-1, one masked), a large shift that a naive exp would
// overflow, and a fully masked row.
func TestSoftmax(t *testing.T) {
	inf := math.Inf(-1)
	for _, c := range []struct{ s, want []float64 }{
		{[]float64{-1, math.Ln2 - 1, inf, 2*math.Ln2 - 1}, []float64{1.0 / 7, 2.0 / 7, 0, 4.0 / 7}},
		{[]float64{1000, 1000 + math.Ln2}, []float64{1.0 / 3, 2.0 / 3}},
		{[]float64{inf, inf}, []float64{0, 0}},
	} {
		got := append([]float64(nil), c.s...)
		Softmax(got)
		for j := range got {
			if math.Abs(got[j]-c.want[j]) > 1e-12 {
				t.Errorf("Softmax(%v) = %v, want %v", c.s, got, c.want)
				break
			}
		}
	}
}
