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
	// NVRTC before 12 cannot build sm_90a: the default (wgmma) variants are
	// then replaced by the mma.sync ones, and the v6 cases below skipped.
	ma, _, err := cuda.NVRTCVersion()
	if err != nil {
		t.Fatal(err)
	}
	wgmma := ma >= 12
	cfgFor := func(c Config) Config {
		if !wgmma && c.FwdVariant == 0 {
			c.FwdVariant = 4
		}
		if !wgmma && c.BwdVariant == 0 {
			c.BwdVariant = 4
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
	// The deterministic backward (dQ pass, group-summed dK/dV) and forward
	// v5 at every head dimension, with a mask, a score program and q block 64.
	for _, c := range []struct {
		name  string
		mask  *flex.MaskProgram
		score *flex.ScoreProgram
		cfg   Config
	}{
		{"det/dflash16/d128/g4/fwd5", flex.DFlashMask(16), nil, Config{HeadDim: 128, Group: 4, Deterministic: true, FwdVariant: 5}},
		{"det/causal/d64/fp16/fwd5", flex.Causal(), nil, Config{HeadDim: 64, DType: dtype.F16, Deterministic: true, FwdVariant: 5}},
		{"det/window/d256/g2/bq64", flex.SlidingWindow(77), nil, Config{HeadDim: 256, Group: 2, BlockQ: 64, Deterministic: true}},
		{"det/causal+softcap/d128", flex.Causal(), flex.SoftcapScalar(), Config{HeadDim: 128, Deterministic: true, FwdVariant: 5}},
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
	// The wgmma kernels (v6) need NVRTC 12 or later for sm_90a.
	if wgmma {
		for _, c := range []struct {
			name  string
			mask  *flex.MaskProgram
			score *flex.ScoreProgram
			cfg   Config
		}{
			{"v6/dflash16/d128/g4", flex.DFlashMask(16), nil, Config{HeadDim: 128, Group: 4, FwdVariant: 6, BwdVariant: 6}},
			{"v6/causal+softcap/d64/fp16", flex.Causal(), flex.SoftcapScalar(), Config{HeadDim: 64, DType: dtype.F16, FwdVariant: 6, BwdVariant: 6}},
			{"v6/document+relbias/d128/bq64", flex.Document(true), flex.RelativeBias(8), Config{HeadDim: 128, BlockQ: 64, FwdVariant: 6, BwdVariant: 6}},
			{"v6/window/d256/g2", flex.SlidingWindow(77), nil, Config{HeadDim: 256, Group: 2, FwdVariant: 6, BwdVariant: 6}},
			{"v6/causal+softcap/d256", flex.Causal(), flex.SoftcapScalar(), Config{HeadDim: 256, FwdVariant: 6, BwdVariant: 6}},
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
						t.Fatalf("wgmma module %s accepted an sm_80 device", m.family)
					}
				}
				if !a.fwd.wgmma {
					t.Fatal("forward v6 module not marked wgmma")
				}
			})
		}
	} else {
		t.Log("wgmma (v6) sources not compiled: NVRTC 12 or later needed for sm_90a")
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
