package tensor_test

import (
	"strings"
	"testing"

	"dflash/dtype"
	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestResidualInPlace: on a tape that records nothing, LinearAdd and MLP
// may write the sum into the residual itself, and give what a new output
// gets (the conformance suite checks that against a float64 reference); on
// a recording tape that is refused, since a backward step may read the
// residual's values.
func TestResidualInPlace(t *testing.T) {
	rng := testseed.New(t)
	const rows, in, hid, inter = 5, 7, 6, 4
	b := tensor.NewCPU[float32](1)
	rand := func(name string, shape ...int) *tensor.Tensor {
		x := tensor.New[float32](name, shape...)
		x.FillNormal(rng, 0, 1)
		return x
	}
	x, w, bias := rand("x", rows, in), rand("w", hid, in), rand("b", hid)
	w2, down := rand("w2", 2*inter, hid), rand("down", hid, inter)
	res := rand("res", rows, hid)
	for _, c := range []struct {
		name string
		op   func(tp *tensor.Tape, res, into *tensor.Tensor) *tensor.Tensor
	}{
		{"LinearAdd", func(tp *tensor.Tape, res, into *tensor.Tensor) *tensor.Tensor {
			return tp.LinearAdd(x, w, bias, res, into)
		}},
		{"MLP", func(tp *tensor.Tape, res, into *tensor.Tensor) *tensor.Tensor {
			return tp.MLP(res, w2, down, res, into) // res is the MLP's input too
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := c.op(tensor.NewInference(b), res, nil).Data()
			r := tensor.FromData("r", append([]float32(nil), res.Data()...), res.Shape...)
			got := c.op(tensor.NewInference(b), r, r)
			if &got.Data()[0] != &r.Data()[0] {
				t.Fatalf("in place: the result is not in the residual's storage")
			}
			backendtest.Close(t, c.name+" in place", got.Data(), dtype.Convert[float64](want), 1e-6)
			defer func() {
				if s, _ := recover().(string); !strings.Contains(s, "in place into the residual") {
					t.Errorf("in place on a recording tape: panic %q, want one about the residual", s)
				}
			}()
			c.op(tensor.NewTape(backendtest.NewStepCPU(1)), r, r)
		})
	}
}
