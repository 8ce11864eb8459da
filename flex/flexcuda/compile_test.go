package flexcuda

import (
	"context"
	"strings"
	"testing"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/flex"
	"dflash/jit"
)

// programCases are the library's programs, every mask with the identity
// score and the identity mask... every score with a causal mask.
func programCases() []struct {
	name  string
	mask  *flex.MaskProgram
	score *flex.ScoreProgram
} {
	return []struct {
		name  string
		mask  *flex.MaskProgram
		score *flex.ScoreProgram
	}{
		{"causal", flex.Causal(), nil},
		{"window", flex.SlidingWindow(77), nil},
		{"document", flex.Document(true), nil},
		{"prefixlm", flex.PrefixLM(), nil},
		{"dflash16", flex.DFlashMask(16), nil},
		{"causal+softcap", flex.Causal(), flex.SoftcapScalar()},
		{"causal+alibi", flex.Causal(), flex.ALiBi()},
		{"document+relbias", flex.Document(false), flex.RelativeBias(8)},
	}
}

// compileCase is a configuration TestGeneratedSourcesCompile compiles.
type compileCase struct {
	name  string
	mask  *flex.MaskProgram
	score *flex.ScoreProgram
	cfg   Config
}

// TestGeneratedSourcesCompile compiles the forward, backward and block-mask
// builder sources of every library program with NVRTC for sm_90 (no GPU
// needed); it skips where NVRTC is missing.
func TestGeneratedSourcesCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("compiling with NVRTC takes seconds per kernel; not in -short")
	}
	n, err := jit.NewNVRTC()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	cache, err := jit.New(jit.Config{Compiler: n})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// NVRTC before 12 cannot build sm_90a: the default (Hopper) kernels are
	// then replaced by the portable ones, and the Hopper cases below skipped.
	ma, _, err := cuda.NVRTCVersion()
	if err != nil {
		t.Fatal(err)
	}
	wgmma := ma >= 12
	cfgFor := func(c Config) Config {
		if !wgmma && c.Fwd == KernelAuto {
			c.Fwd = Portable
		}
		if !wgmma && c.Bwd == KernelAuto {
			c.Bwd = Portable
		}
		return c
	}
	for _, c := range programCases() {
		t.Run(c.name, func(t *testing.T) {
			a, err := New(cache, c.mask, c.score, cfgFor(Config{HeadDim: 64, Group: 2}))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []*module{a.fwd, a.bwd} {
				if _, err := m.image(ctx, "sm_90"); err != nil {
					t.Fatalf("%s: %v", m.family, err)
				}
			}
			b, err := NewBuilder(cache, c.mask, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.mod.kernel("sm_90").Image(ctx); err != nil {
				t.Fatalf("builder: %v", err)
			}
		})
	}
	// The deterministic backward (dQ pass, per-head dK/dV slices) and the
	// portable forward at every head dimension, with a mask, a score program
	// and q block 64.
	for _, c := range []compileCase{
		{"det/dflash16/d128/g4/portable", flex.DFlashMask(16), nil, Config{HeadDim: 128, Group: 4, Deterministic: true, Fwd: Portable}},
		{"det/causal/d64/fp16/portable", flex.Causal(), nil, Config{HeadDim: 64, DType: dtype.F16, Deterministic: true, Fwd: Portable}},
		{"det/window/d256/g2/bq64/portable", flex.SlidingWindow(77), nil, Config{HeadDim: 256, Group: 2, BlockQ: 64, Deterministic: true, Fwd: Portable}},
		{"det/causal+softcap/d128", flex.Causal(), flex.SoftcapScalar(), Config{HeadDim: 128, Deterministic: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := New(cache, c.mask, c.score, cfgFor(c.cfg))
			if err != nil {
				t.Fatal(err)
			}
			_, bsrc := a.Sources()
			if !strings.Contains(bsrc, "flex_bwd_dq(") || strings.Contains(bsrc, "#include \"flex_bwd_dq.cuh\"") {
				t.Fatal("deterministic backward source lacks the inlined flex_bwd_dq kernel")
			}
			for _, m := range []*module{a.fwd, a.bwd} {
				if _, err := m.image(ctx, "sm_90"); err != nil {
					t.Fatalf("%s: %v", m.family, err)
				}
			}
		})
	}
	// The Hopper kernels need NVRTC 12 or later for sm_90a.
	if wgmma {
		for _, c := range []compileCase{
			{"hopper/dflash16/d128/g4", flex.DFlashMask(16), nil, Config{HeadDim: 128, Group: 4, Fwd: Hopper, Bwd: Hopper}},
			{"hopper/causal+softcap/d64/fp16", flex.Causal(), flex.SoftcapScalar(), Config{HeadDim: 64, DType: dtype.F16, Fwd: Hopper, Bwd: Hopper}},
			{"hopper/document+relbias/d128/bq64", flex.Document(true), flex.RelativeBias(8), Config{HeadDim: 128, BlockQ: 64, Fwd: Hopper, Bwd: Hopper}},
			{"hopper/window/d256/g2", flex.SlidingWindow(77), nil, Config{HeadDim: 256, Group: 2, Fwd: Hopper, Bwd: Hopper}},
			{"hopper/causal+alibi/d256", flex.Causal(), flex.ALiBi(), Config{HeadDim: 256, Fwd: Hopper, Bwd: Hopper}},
		} {
			t.Run(c.name, func(t *testing.T) {
				a, err := New(cache, c.mask, c.score, c.cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Compile(ctx, "sm_90", true); err != nil {
					t.Fatal(err)
				}
				for _, m := range []*module{a.fwd, a.bwd} {
					if _, err := m.target("sm_80"); m.wgmma && err == nil {
						t.Fatalf("Hopper module %s accepted an sm_80 device", m.family)
					}
				}
				if !a.fwd.wgmma || !a.bwd.wgmma {
					t.Fatal("Hopper modules not marked wgmma")
				}
			})
		}
	} else {
		t.Log("Hopper sources not compiled: NVRTC 12 or later needed for sm_90a")
	}
	b, err := NewDFlashBuilder(cache, 16, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.mod.kernel("sm_90").Image(ctx); err != nil {
		t.Fatalf("dflash builder: %v", err)
	}
	t.Logf("%d compiles with %s", cache.Stats().Compiles, cache.CompilerVersion())
}
