package flexcuda

import (
	"strings"
	"testing"

	"dflash/dtype"
)

// TestSpecStorage checks that Spec.DType reaches the key and the generated
// source, that zero means bf16, and that other types are refused by name.
func TestSpecStorage(t *testing.T) {
	for _, c := range []struct {
		dt       dtype.DType
		key, def string
	}{{dtype.Invalid, "/bf16/", "#define FLEX_FP16 0"}, {dtype.BF16, "/bf16/", "#define FLEX_FP16 0"}, {dtype.F16, "/f16/", "#define FLEX_FP16 1"}} {
		s := Spec{HeadDim: 64, DType: c.dt, Group: 1, BlockQ: 128, BlockKV: 128, Fwd: Portable, Bwd: Portable}
		if !strings.Contains(s.Key(), c.key) {
			t.Errorf("%v: key %s lacks %s", c.dt, s.Key(), c.key)
		}
		src, err := Source(s, Program{CUDA: causalCUDA}, false)
		if err != nil || !strings.Contains(src, c.def) {
			t.Errorf("%v: source lacks %q (err %v)", c.dt, c.def, err)
		}
	}
	err := Spec{HeadDim: 64, DType: dtype.F32, Group: 1, BlockQ: 128, BlockKV: 128, Fwd: Portable, Bwd: Portable}.Validate()
	if err == nil || !strings.Contains(err.Error(), "storage type f32 not supported") {
		t.Errorf("f32 storage: %v", err)
	}
}
