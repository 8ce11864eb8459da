package flexcuda

import (
	"strings"
	"testing"

	"dflash/flex"
	"dflash/jit"
)

// TestVariantResolution checks how Config and the environment pick the
// kernel versions, and that the wgmma (v6, v7) modules ask for sm_90a.
func TestVariantResolution(t *testing.T) {
	var cache *jit.Cache // nothing is compiled here: New only generates sources
	t.Setenv("DFLASH_FLEX_FWD", "")
	t.Setenv("DFLASH_FLEX_BWD", "")
	for _, c := range []struct {
		name         string
		env          [2]string // DFLASH_FLEX_FWD, DFLASH_FLEX_BWD
		cfg          Config
		fwd, bwd     int
		errSubstring string
	}{
		{name: "default d128", cfg: Config{HeadDim: 128}, fwd: 7, bwd: 6},
		{name: "default d64 gqa", cfg: Config{HeadDim: 64, Group: 4}, fwd: 7, bwd: 6},
		{name: "default d256", cfg: Config{HeadDim: 256}, fwd: 7, bwd: 6},
		{name: "deterministic keeps v4 backward", cfg: Config{HeadDim: 128, Deterministic: true}, fwd: 7, bwd: 4},
		{name: "env v6 forward", env: [2]string{"6", ""}, cfg: Config{HeadDim: 128}, fwd: 6, bwd: 6},
		{name: "env v4", env: [2]string{"4", "4"}, cfg: Config{HeadDim: 128}, fwd: 4, bwd: 4},
		{name: "env v6 backward deterministic falls back", env: [2]string{"", "6"}, cfg: Config{HeadDim: 256, Deterministic: true}, fwd: 7, bwd: 4},
		{name: "env v4 at d256", env: [2]string{"3", "4"}, cfg: Config{HeadDim: 256}, fwd: 3, bwd: 4},
		{name: "config beats env", env: [2]string{"4", "4"}, cfg: Config{HeadDim: 128, FwdVariant: 6, BwdVariant: 6}, fwd: 6, bwd: 6},
		{name: "no backward v5", cfg: Config{HeadDim: 128, BwdVariant: 5}, errSubstring: "backward variant 5"},
		{name: "env out of range", env: [2]string{"8", ""}, cfg: Config{HeadDim: 128}, errSubstring: "DFLASH_FLEX_FWD"},
		{name: "explicit v6 deterministic", cfg: Config{HeadDim: 128, BwdVariant: 6, Deterministic: true}, errSubstring: "backward v6"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("DFLASH_FLEX_FWD", c.env[0])
			t.Setenv("DFLASH_FLEX_BWD", c.env[1])
			a, err := New(cache, flex.Causal(), nil, c.cfg)
			if c.errSubstring != "" {
				if err == nil || !strings.Contains(err.Error(), c.errSubstring) {
					t.Fatalf("err = %v, want one containing %q", err, c.errSubstring)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := a.Spec()
			if s.fwdVariant() != c.fwd || s.bwdVariant() != c.bwd {
				t.Fatalf("variants fwd %d bwd %d, want %d %d (spec %s)", s.fwdVariant(), s.bwdVariant(), c.fwd, c.bwd, s.Key())
			}
			fsrc, bsrc := a.Sources()
			if got := strings.Contains(fsrc, "wgmma.mma_async"); got != (c.fwd >= 6) {
				t.Errorf("forward source has wgmma: %v, want %v", got, c.fwd >= 6)
			}
			if got := strings.Contains(fsrc, "flex_tma_load3(sK"); got != (c.fwd == 7) {
				t.Errorf("forward source has TMA copies: %v, want %v", got, c.fwd == 7)
			}
			if got := strings.Contains(bsrc, "#define FLEX_BWD_WG 1"); got != (c.bwd == 6) {
				t.Errorf("backward source selects the wgmma dkdv: %v, want %v", got, c.bwd == 6)
			}
			for _, m := range []*module{a.fwd, a.bwd} {
				arch, err := m.target("sm_90")
				if err != nil {
					t.Fatal(err)
				}
				want := "sm_90"
				if m.wgmma {
					want = "sm_90a"
				}
				if arch != want {
					t.Errorf("%s on sm_90 compiles for %s, want %s", m.family, arch, want)
				}
				_, err = m.target("sm_80")
				if m.wgmma && (err == nil || !strings.Contains(err.Error(), "variant 4")) {
					t.Errorf("%s on sm_80: err %v, want one naming variant 4", m.family, err)
				}
				if !m.wgmma && err != nil {
					t.Errorf("%s on sm_80: %v", m.family, err)
				}
			}
		})
	}
}

// TestResourcesWgmma checks the launch shapes of the wgmma kernels (v6, v7) against the
// shared-memory sizes their templates define.
func TestResourcesWgmma(t *testing.T) {
	for _, c := range []struct {
		spec            Spec
		fwdSmem, fwdThr int
		bwdSmem         int
	}{
		// (q rows + 2 K + 2 V tiles of 128 rows) x D x 2 bytes + 1024 alignment + 8 per kv block
		{Spec{HeadDim: 128, Group: 1, BlockQ: 128, BlockKV: 128, FwdV6: true, BwdV6: true}, (128+4*128)*128*2 + 1024 + 8*10, 256,
			// K, V of 128 rows, 3 stages of Q and dO of 64 rows, two dS^T 128x64, 3 x (LSE, Dlt) of 64, alignment, 8 per q block
			(2*128*128+6*64*128+2*128*64)*2 + 24*64 + 1024 + 8*10},
		// head dim 256: kv tiles of 64 rows forward; backward q tiles of 32 rows in 2 stages
		{Spec{HeadDim: 256, Group: 2, BlockQ: 64, BlockKV: 128, FwdV6: true, BwdV6: true}, (64+4*64)*256*2 + 1024 + 8*10, 128,
			(2*128*256+2*2*32*256+128*64)*2 + 4*32*4 + 1024 + 8*10},
		// v7: Q, 2 stages of K and V tiles of 128 rows, 1+4x2 mbarriers; a producer warpgroup
		{Spec{HeadDim: 128, Group: 1, BlockQ: 128, BlockKV: 128, FwdV7: true}, (128+2*2*128)*128*2 + 8*9 + 1024 + 8*10, 384, 0},
		// head dim 64: 4 stages
		{Spec{HeadDim: 64, Group: 4, BlockQ: 128, BlockKV: 128, FwdV7: true}, (128+2*4*128)*64*2 + 8*17 + 1024 + 8*10, 384, 0},
		// head dim 256: kv tiles of 64 rows; q block 64 is one consumer warpgroup
		{Spec{HeadDim: 256, Group: 2, BlockQ: 64, BlockKV: 128, FwdV7: true}, (64+2*2*64)*256*2 + 8*9 + 1024 + 8*10, 256, 0},
	} {
		f := FwdResources(c.spec, 10)
		if f.SharedMem != c.fwdSmem || f.Threads != c.fwdThr {
			t.Errorf("%s: forward %d bytes, %d threads; want %d, %d", c.spec.Key(), f.SharedMem, f.Threads, c.fwdSmem, c.fwdThr)
		}
		if c.spec.BwdV6 {
			b := BwdResources(c.spec, 10)
			if b.SharedMem != c.bwdSmem || b.Threads != 256 {
				t.Errorf("%s: backward %d bytes, %d threads; want %d, 256", c.spec.Key(), b.SharedMem, b.Threads, c.bwdSmem)
			}
		}
		if b := BwdResources(c.spec, 10); f.SharedMem > 227*1024 || b.SharedMem > 227*1024 {
			t.Errorf("%s: %d / %d bytes, more than an H100/H200 block may have", c.spec.Key(), f.SharedMem, b.SharedMem)
		}
	}
}

// TestTuningDefines: DFLASH_FLEX_DEFINES reaches the generated sources as
// #defines ahead of the templates' own defaults (so the kernel cache keys
// differ), and anything but NAME=integer with a known switch is dropped.
func TestTuningDefines(t *testing.T) {
	t.Setenv("DFLASH_FLEX_FWD", "")
	t.Setenv("DFLASH_FLEX_BWD", "")
	src := func(env string) (string, string) {
		t.Setenv("DFLASH_FLEX_DEFINES", env)
		a, err := New(nil, flex.Causal(), nil, Config{HeadDim: 64})
		if err != nil {
			t.Fatal(err)
		}
		return a.Sources()
	}
	f0, b0 := src("")
	f1, b1 := src("FLEX_WS_PP=0, FLEX_BWD_DQ_COLS=0")
	if !strings.Contains(f1, "#define FLEX_WS_PP 0\n") || !strings.Contains(b1, "#define FLEX_BWD_DQ_COLS 0\n") {
		t.Error("switches missing from the sources")
	}
	if f0 == f1 || b0 == b1 {
		t.Error("sources with and without switches are equal: the cache could not tell them apart")
	}
	if i, j := strings.Index(f1, "#define FLEX_WS_PP 0"), strings.Index(f1, "#ifndef FLEX_WS_PP"); i < 0 || j < 0 || i > j {
		t.Errorf("the switch (at %d) must come before the template's default (at %d)", i, j)
	}
	for _, bad := range []string{"FLEX_D=32", "FLEX_WS_PP=0;int x", "FLEX_WS_PP", "FLEX_WS_PP=x"} {
		if f, b := src(bad); f != f0 || b != b0 {
			t.Errorf("DFLASH_FLEX_DEFINES=%q changed the sources", bad)
		}
	}
}
