package flexcuda

import (
	"strings"
	"testing"
)

const causalCUDA = `__device__ __forceinline__ bool flex_mask(const FlexArgs &A, int b, int h, int q, int kv) { return kv <= q; }
__device__ __forceinline__ float flex_score(const FlexArgs &A, float s, int b, int h, int q, int kv) { return s; }`

func TestSourceSplicesProgramAndSpec(t *testing.T) {
	for _, bwd := range []bool{false, true} {
		t.Run(map[bool]string{false: "fwd", true: "bwd"}[bwd], func(t *testing.T) {
			s := Spec{HeadDim: 128, Group: 4, BlockQ: 128, BlockKV: 128, MaskHash: "abcdef0123456789", Fwd: Portable, Bwd: Portable}
			src, err := Source(s, Program{CUDA: causalCUDA}, bwd)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"#define FLEX_D 128", "#define FLEX_GROUP 4", "#define FLEX_PROGRAM_DEFINED", "return kv <= q;", "#define FLEX_NARGS 0"} {
				if !strings.Contains(src, want) {
					t.Errorf("source lacks %q", want)
				}
			}
			if strings.Contains(src, `#include "flex_common.cuh"`) || strings.Contains(src, "@flex-program") {
				t.Errorf("include or default program block left in the source")
			}
			again, _ := Source(s, Program{CUDA: causalCUDA}, bwd)
			if again != src {
				t.Errorf("source not deterministic")
			}
		})
	}
}

func TestSpecKeyAndValidate(t *testing.T) {
	a := Spec{HeadDim: 128, Group: 4, BlockQ: 128, BlockKV: 128, MaskHash: "m1", Fwd: Hopper, Bwd: Hopper}
	b := a
	b.Group = 2
	if a.Key() == b.Key() {
		t.Errorf("keys of different GQA groups collide: %s", a.Key())
	}
	c := a
	c.Bwd = Portable
	if a.Key() == c.Key() {
		t.Errorf("keys of different backward kernels collide: %s", a.Key())
	}
	bad := a
	bad.HeadDim = 96
	if err := bad.Validate(); err == nil {
		t.Errorf("head dim 96 accepted")
	}
}

func TestResourcesCheckNamesLimit(t *testing.T) {
	s := Spec{HeadDim: 256, Group: 1, BlockQ: 128, BlockKV: 128, Fwd: Portable, Bwd: Portable}
	r := BwdResources(s, 64)
	r.SmemOptIn = 100 * 1024
	err := r.Check()
	if err == nil || !strings.Contains(err.Error(), "shared-memory limit") {
		t.Fatalf("want a shared-memory limit error, got %v", err)
	}
	r = FwdResources(Spec{HeadDim: 128, Group: 1, BlockQ: 128, BlockKV: 128, Fwd: Hopper, Bwd: Hopper}, 32)
	r.SmemOptIn = 227 * 1024
	r.MaxRegs = 168 // 384 threads
	if err := r.Check(); err != nil {
		t.Fatalf("fwd D128 within limits: %v", err)
	}
	r.MaxRegs = 171
	if err := r.Check(); err == nil || !strings.Contains(err.Error(), "register limit") {
		t.Fatalf("want a register limit error, got %v", err)
	}
}
