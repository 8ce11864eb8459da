package tensor_test

import (
	"testing"

	"dflash/tensor"
	"dflash/tensor/backendtest"
)

func TestCPUConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		b    *tensor.CPU[float32]
	}{
		{"workers1", tensor.NewCPU[float32](1)},
		{"workers3", tensor.NewCPU[float32](3)},
		{"portable-gemm", tensor.NewCPU[float32](2).WithGemm(tensor.GemmPortable)},
		{"gonum-gemm", tensor.NewCPU[float32](2).WithGemm(tensor.GemmGonum)},
	} {
		t.Run(c.name, func(t *testing.T) { backendtest.Run(t, c.b, backendtest.F32) })
	}
}
