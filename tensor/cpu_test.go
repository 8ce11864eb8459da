package tensor_test

import (
	"fmt"
	"strings"
	"testing"

	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestCPUHostSnapshot is the conformance suite's HostSnapshot alone, on
// the CPU backend (whose master values are the host memory the ops use).
func TestCPUHostSnapshot(t *testing.T) { backendtest.HostSnapshot(t, tensor.NewCPU[float32](2)) }

func TestCPUConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		b    tensor.Backend[float32]
	}{
		{"step-memory", backendtest.NewStepCPU(2)}, // outputs and new gradients NaN-filled
		{"workers1", tensor.NewCPU[float32](1)},
		{"workers3", tensor.NewCPU[float32](3)},
		{"portable-gemm", tensor.NewCPU[float32](2).WithGemm(tensor.GemmPortable)},
		{"gonum-gemm", tensor.NewCPU[float32](2).WithGemm(tensor.GemmGonum)},
	} {
		t.Run(c.name, func(t *testing.T) { backendtest.Run(t, c.b, backendtest.F32) })
	}
}

// TestBackwardOnAnotherTape: the backward pass of a loss recorded on one
// tape, asked of another tape, panics instead of leaving every gradient zero.
func TestBackwardOnAnotherTape(t *testing.T) {
	cpu := tensor.NewCPU[float64](1)
	w := tensor.FromData("w", []float64{1, 2}, 2)
	w.RequiresGrad = true
	loss := tensor.NewTape(cpu).Reshape(w, 1, 2)
	loss = tensor.NewTape(cpu).Slice(loss, 1, 0, 1)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "computed on another tape") {
			t.Fatalf("panic %v", r)
		}
	}()
	tensor.NewTape(cpu).Backward(loss)
}
