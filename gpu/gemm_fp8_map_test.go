package gpu

import (
	"testing"

	"dflash/dtype"
)

// TestGemmSpecFP8: an FP8 spec takes bf16 output and per-tensor scales by
// default, maps to cuBLASLt's TN form (its A, our W, transposed; its B, our
// X, not), and the forms cuBLASLt's FP8 kernels refuse panic up front.
func TestGemmSpecFP8(t *testing.T) {
	s := GemmSpec{M: 128, N: 4096, K: 4096, TransB: true, In: dtype.F8E4M3}.normalized()
	if s.Out != dtype.BF16 || s.Scale != ScaleTensor || s.LDA != 4096 || s.LDB != 4096 || s.LDC != 4096 {
		t.Errorf("normalized FP8 spec %+v", s)
	}
	cm := s.toColMajor()
	if !cm.transA || cm.transB {
		t.Errorf("cuBLASLt transposes A %v B %v, want TN", cm.transA, cm.transB)
	}
	if cm.aRows != 4096 || cm.aCols != 4096 || cm.bRows != 4096 || cm.bCols != 128 || cm.cRows != 4096 || cm.cCols != 128 {
		t.Errorf("column-major view %+v", cm)
	}
	ok := GemmSpec{M: 16, N: 48, K: 64, TransB: true, In: dtype.F8E4M3, Out: dtype.F32, Scale: ScaleRowsCols}
	ok.normalized()
	for name, s := range map[string]GemmSpec{
		"A transposed":     {M: 16, N: 48, K: 64, TransA: true, TransB: true, In: dtype.F8E4M3},
		"B not transposed": {M: 16, N: 48, K: 64, In: dtype.F8E4M3},
		"K not 16":         {M: 16, N: 48, K: 72, TransB: true, In: dtype.F8E4M3},
		"LDA not 16":       {M: 16, N: 48, K: 64, LDA: 72, TransB: true, In: dtype.F8E4M3},
		"LDC bytes":        {M: 16, N: 44, K: 64, TransB: true, In: dtype.F8E4M3},
		"batched":          {M: 16, N: 48, K: 64, TransB: true, In: dtype.F8E4M3, Batch: 2},
		"fp8 output":       {M: 16, N: 48, K: 64, TransB: true, In: dtype.F8E4M3, Out: dtype.F8E4M3},
		"tf32":             {M: 16, N: 48, K: 64, TransB: true, In: dtype.F8E4M3, TF32: true},
		"bad scale":        {M: 16, N: 48, K: 64, TransB: true, In: dtype.F8E4M3, Scale: 7},
		"scaled bf16":      {M: 16, N: 48, K: 64, TransB: true, In: dtype.BF16, Scale: ScaleTensor},
		"fast bf16":        {M: 16, N: 48, K: 64, TransB: true, In: dtype.BF16, FastAccum: true},
		"e5m2":             {M: 16, N: 48, K: 64, TransB: true, In: dtype.F8E5M2},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s accepted", name)
				}
			}()
			s.normalized()
		})
	}
}

// TestGemmTuneKeyFP8: FP8 products with either scaling, and with fast
// accumulation, have keys of their own, apart from each other and from the bf16 product of the same shape.
func TestGemmTuneKeyFP8(t *testing.T) {
	tu := &gemmTuner{gpu: "NVIDIA H200", cublasLt: 130000}
	seen := map[string]string{}
	for name, s := range map[string]GemmSpec{
		"bf16":      {M: 128, N: 4096, K: 4096, TransB: true, In: dtype.BF16},
		"tensor":    {M: 128, N: 4096, K: 4096, TransB: true, In: dtype.F8E4M3},
		"rows-cols": {M: 128, N: 4096, K: 4096, TransB: true, In: dtype.F8E4M3, Scale: ScaleRowsCols},
		"fast":      {M: 128, N: 4096, K: 4096, TransB: true, In: dtype.F8E4M3, Scale: ScaleRowsCols, FastAccum: true},
		"f32 out":   {M: 128, N: 4096, K: 4096, TransB: true, In: dtype.F8E4M3, Out: dtype.F32},
	} {
		k := tu.key(GemmWorkspace, false, s.normalized())
		if prev, dup := seen[k]; dup {
			t.Errorf("%s has the key of %s: %s", name, prev, k)
		}
		seen[k] = name
	}
}
