package cuda

import (
	"testing"

	"dflash/dtype"
)

// TestLibTypes checks the mappings against the enum values of the CUDA
// headers (library_types.h, nccl.h, cuda.h), written out here by hand, and
// that a type a library lacks panics.
func TestLibTypes(t *testing.T) {
	want := []struct {
		name string
		vals map[dtype.DType]int64
		fn   func(dtype.DType) int64
	}{
		{"BlasType", map[dtype.DType]int64{dtype.F32: 0, dtype.F64: 1, dtype.F16: 2, dtype.BF16: 14, dtype.F8E4M3: 28, dtype.F8E5M2: 29},
			func(d dtype.DType) int64 { return int64(BlasType(d)) }},
		{"NCCLType", map[dtype.DType]int64{dtype.I8: 0, dtype.U8: 1, dtype.I32: 2, dtype.U32: 3, dtype.I64: 4,
			dtype.U64: 5, dtype.F16: 6, dtype.F32: 7, dtype.F64: 8, dtype.BF16: 9},
			func(d dtype.DType) int64 { return int64(NCCLType(d)) }},
		{"TensorMapType", map[dtype.DType]int64{dtype.F16: 6, dtype.BF16: 9},
			func(d dtype.DType) int64 { return int64(TensorMapType(d)) }},
	}
	for _, w := range want {
		for dt := dtype.F64; dt.Valid(); dt++ {
			func() {
				v, ok := w.vals[dt]
				defer func() {
					if p := recover(); ok == (p != nil) {
						t.Errorf("%s(%v): panic %v, want a value: %v", w.name, dt, p, ok)
					}
				}()
				if got := w.fn(dt); got != v {
					t.Errorf("%s(%v) = %d, want %d", w.name, dt, got, v)
				}
			}()
		}
	}
}
