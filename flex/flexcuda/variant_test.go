package flexcuda

import (
	"fmt"
	"strings"
	"testing"

	"dflash/flex"
	"dflash/internal/switches"
	"dflash/jit"
)

// TestKernelChoice checks how Config, Config.Arch and the environment pick
// the kernels, and that the Hopper modules ask for sm_90a.
func TestKernelChoice(t *testing.T) {
	var cache *jit.Cache // nothing is compiled here: New only generates sources
	for _, c := range []struct {
		name         string
		env          [2]string // DFLASH_FLEX_FWD, DFLASH_FLEX_BWD
		cfg          Config
		fwd, bwd     Kernel
		errSubstring string
	}{
		{name: "default d128", cfg: Config{HeadDim: 128}, fwd: Hopper, bwd: Hopper},
		{name: "default d64 gqa", cfg: Config{HeadDim: 64, Group: 4}, fwd: Hopper, bwd: Hopper},
		{name: "default d256", cfg: Config{HeadDim: 256}, fwd: Hopper, bwd: Hopper},
		{name: "arch sm_90", cfg: Config{HeadDim: 128, Arch: "sm_90"}, fwd: Hopper, bwd: Hopper},
		{name: "arch sm_80 portable", cfg: Config{HeadDim: 128, Arch: "sm_80"}, fwd: Portable, bwd: Portable},
		{name: "arch sm_100 portable", cfg: Config{HeadDim: 64, Arch: "sm_100"}, fwd: Portable, bwd: Portable},
		{name: "deterministic keeps the portable backward", cfg: Config{HeadDim: 128, Deterministic: true}, fwd: Hopper, bwd: Portable},
		{name: "env portable forward", env: [2]string{"portable", ""}, cfg: Config{HeadDim: 128}, fwd: Portable, bwd: Hopper},
		{name: "env portable", env: [2]string{"portable", "portable"}, cfg: Config{HeadDim: 128}, fwd: Portable, bwd: Portable},
		{name: "env beats arch", env: [2]string{"hopper", "hopper"}, cfg: Config{HeadDim: 128, Arch: "sm_80"}, fwd: Hopper, bwd: Hopper},
		{name: "env hopper backward deterministic falls back", env: [2]string{"", "hopper"}, cfg: Config{HeadDim: 256, Deterministic: true}, fwd: Hopper, bwd: Portable},
		{name: "config beats env", env: [2]string{"portable", "portable"}, cfg: Config{HeadDim: 128, Fwd: Hopper, Bwd: Hopper}, fwd: Hopper, bwd: Hopper},
		{name: "env misspelt", env: [2]string{"7", ""}, cfg: Config{HeadDim: 128}, errSubstring: "DFLASH_FLEX_FWD"},
		{name: "kernel out of range", cfg: Config{HeadDim: 128, Bwd: Kernel(9)}, errSubstring: "backward kernel Kernel(9)"},
		{name: "explicit hopper deterministic", cfg: Config{HeadDim: 128, Bwd: Hopper, Deterministic: true}, errSubstring: "Hopper backward"},
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
			if s.Fwd != c.fwd || s.Bwd != c.bwd {
				t.Fatalf("kernels %v %v, want %v %v (spec %s)", s.Fwd, s.Bwd, c.fwd, c.bwd, s.Key())
			}
			fsrc, bsrc := a.Sources()
			if got := strings.Contains(fsrc, "wgmma.mma_async"); got != (c.fwd == Hopper) {
				t.Errorf("forward source has wgmma: %v, want %v", got, c.fwd == Hopper)
			}
			if got := strings.Contains(fsrc, "flex_tma_load3(sK"); got != (c.fwd == Hopper) {
				t.Errorf("forward source has TMA copies: %v, want %v", got, c.fwd == Hopper)
			}
			if got := strings.Contains(bsrc, "#define FLEX_BWD_WG 1"); got != (c.bwd == Hopper) {
				t.Errorf("backward source selects the wgmma dkdv: %v, want %v", got, c.bwd == Hopper)
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
				if m.wgmma && (err == nil || !strings.Contains(err.Error(), "portable")) {
					t.Errorf("%s on sm_80: err %v, want one naming the portable kernels", m.family, err)
				}
				if !m.wgmma && err != nil {
					t.Errorf("%s on sm_80: %v", m.family, err)
				}
			}
		})
	}
}

func TestParseKernel(t *testing.T) {
	for _, k := range []Kernel{Portable, Hopper} {
		if got, err := ParseKernel(k.String()); err != nil || got != k {
			t.Errorf("ParseKernel(%q) = %v, %v", k.String(), got, err)
		}
	}
	for _, bad := range []string{"", "auto", "v7", "Hopper"} {
		if _, err := ParseKernel(bad); err == nil {
			t.Errorf("ParseKernel(%q) accepted", bad)
		}
	}
	// Every kernel the switches offer besides auto is one ParseKernel knows.
	for _, sw := range []*switches.Enum{switches.FlexFwd, switches.FlexBwd} {
		for _, v := range sw.Values {
			if _, err := ParseKernel(v); (err == nil) == (v == "auto") {
				t.Errorf("%s offers %q: ParseKernel says %v", sw.Name, v, err)
			}
		}
	}
}

// TestResourcesHopper checks the launch shapes of the Hopper kernels against
// the shared-memory sizes their templates define.
func TestResourcesHopper(t *testing.T) {
	t.Setenv("DFLASH_FLEX_DEFINES", "FLEX_BWD_DQ_BULK=0") // its buffers and stages: TestBulkDQBackwardShape
	for _, c := range []struct {
		spec            Spec
		fwdSmem, fwdThr int
		bwdSmem         int
	}{
		// Q, 2 stages of K and V tiles of 128 rows, 1+4x2 mbarriers, 1024 alignment, 8 per kv block; a producer warpgroup.
		// Backward: K, V of 128 rows, 3 stages of Q and dO of 64 rows, two dS^T 128x64, 3 x (LSE, Dlt) of 64, alignment, 8 per q block
		{Spec{HeadDim: 128, Group: 1, BlockQ: 128, BlockKV: 128, Fwd: Hopper, Bwd: Hopper}, (128+2*2*128)*128*2 + 8*9 + 1024 + 8*10, 384,
			(2*128*128+6*64*128+2*128*64)*2 + 24*64 + 1024 + 8*10},
		// head dim 64: 4 stages
		{Spec{HeadDim: 64, Group: 4, BlockQ: 128, BlockKV: 128, Fwd: Hopper, Bwd: Hopper}, (128+2*4*128)*64*2 + 8*17 + 1024 + 8*10, 384,
			(2*128*64+6*64*64+2*128*64)*2 + 24*64 + 1024 + 8*10},
		// head dim 256: kv tiles of 64 rows; q block 64 is one consumer warpgroup;
		// backward q tiles of 32 rows in 2 stages, one dS^T buffer
		{Spec{HeadDim: 256, Group: 2, BlockQ: 64, BlockKV: 128, Fwd: Hopper, Bwd: Hopper}, (64+2*2*64)*256*2 + 8*9 + 1024 + 8*10, 256,
			(2*128*256+2*2*32*256+128*64)*2 + 4*32*4 + 1024 + 8*10},
	} {
		f := FwdResources(c.spec, 10)
		if f.SharedMem != c.fwdSmem || f.Threads != c.fwdThr {
			t.Errorf("%s: forward %d bytes, %d threads; want %d, %d", c.spec.Key(), f.SharedMem, f.Threads, c.fwdSmem, c.fwdThr)
		}
		b := BwdResources(c.spec, 10)
		bwdThr := 256
		if c.spec.HeadDim < 256 { // the producer warpgroup and its 2 mbarriers per stage
			c.bwdSmem, bwdThr = c.bwdSmem+2*3*8, 384
		}
		if b.SharedMem != c.bwdSmem || b.Threads != bwdThr {
			t.Errorf("%s: backward %d bytes, %d threads; want %d, %d", c.spec.Key(), b.SharedMem, b.Threads, c.bwdSmem, bwdThr)
		}
		if f.SharedMem > 227*1024 || b.SharedMem > 227*1024 {
			t.Errorf("%s: %d / %d bytes, more than an H100/H200 block may have", c.spec.Key(), f.SharedMem, b.SharedMem)
		}
	}
}

// TestTuningDefines: DFLASH_FLEX_DEFINES sets the tuning switches' values
// in the generated sources (so the kernel cache keys differ), and anything
// but NAME=integer with a known switch is an error of New and Source that
// names the variable and the entry.
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
	if !strings.Contains(f0, "#define FLEX_WS_PP 1\n") || !strings.Contains(b0, "#define FLEX_BWD_DQ_COLS 1\n") {
		t.Error("switches' defaults missing from the sources")
	}
	f1, b1 := src("FLEX_WS_PP=0, FLEX_BWD_DQ_COLS=0")
	if !strings.Contains(f1, "#define FLEX_WS_PP 0\n") || !strings.Contains(b1, "#define FLEX_BWD_DQ_COLS 0\n") {
		t.Error("switches missing from the sources")
	}
	if strings.Contains(f1, "#define FLEX_WS_PP 1\n") || strings.Contains(b1, "#define FLEX_BWD_DQ_COLS 1\n") {
		t.Error("a switch is defined twice")
	}
	if f0 == f1 || b0 == b1 {
		t.Error("sources with and without switches are equal: the cache could not tell them apart")
	}
	for _, bad := range []string{"FLEX_D=32", "FLEX_WS_PP=0;int x", "FLEX_WS_PP", "FLEX_WS_PP=x"} {
		t.Setenv("DFLASH_FLEX_DEFINES", bad)
		_, err := New(nil, flex.Causal(), nil, Config{HeadDim: 64})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("DFLASH_FLEX_DEFINES=%q: entry", bad)) || !strings.Contains(err.Error(), "FLEX_BWD_WS") {
			t.Errorf("DFLASH_FLEX_DEFINES=%q: New: %v, want an error naming the entry and the switches", bad, err)
		}
		spec := Spec{HeadDim: 64, Group: 1, BlockQ: 128, BlockKV: 128, Fwd: Hopper, Bwd: Hopper}
		if _, err := Source(spec, Program{}, true); err == nil || !strings.Contains(err.Error(), "DFLASH_FLEX_DEFINES") {
			t.Errorf("DFLASH_FLEX_DEFINES=%q: Source: %v, want an error naming it", bad, err)
		}
	}
}

// TestProducerBackwardShape: FLEX_BWD_WS=1, the default, gives the Hopper
// backward at head dims 64 and 128 a producer warpgroup (384 threads, two
// mbarriers per Q/dO stage, TMA copies in the source) and leaves head dim
// 256, whose template ignores the switch, alone; FLEX_BWD_WS=0 turns it off.
func TestProducerBackwardShape(t *testing.T) {
	t.Setenv("DFLASH_FLEX_FWD", "")
	t.Setenv("DFLASH_FLEX_BWD", "")
	for _, c := range []struct {
		d       int
		env     string
		threads int
		mbar    int // mbarrier bytes over the default's shared memory
	}{
		{128, "", 384, 2 * 3 * 8}, {128, "FLEX_BWD_WS=0", 256, 0}, {128, "FLEX_BWD_WS=1", 384, 2 * 3 * 8},
		{64, "FLEX_BWD_WS=1", 384, 2 * 3 * 8}, {64, "FLEX_BWD_WS=0", 256, 0}, {256, "FLEX_BWD_WS=1", 256, 0}, {256, "", 256, 0},
	} {
		t.Setenv("DFLASH_FLEX_DEFINES", "FLEX_BWD_WS=0")
		spec := Spec{HeadDim: c.d, Group: 4, BlockQ: 128, BlockKV: 128, Fwd: Hopper, Bwd: Hopper}
		base := BwdResources(spec, 64)
		// The producer alone: the dQ bulk reduce (TestBulkDQBackwardShape) off.
		t.Setenv("DFLASH_FLEX_DEFINES", strings.TrimPrefix(c.env+",FLEX_BWD_DQ_BULK=0", ","))
		r := BwdResources(spec, 64)
		if r.Threads != c.threads || r.SharedMem != base.SharedMem+c.mbar {
			t.Errorf("d%d %q: %d threads, %d bytes; want %d, %d", c.d, c.env, r.Threads, r.SharedMem, c.threads, base.SharedMem+c.mbar)
		}
		if r.SharedMem > 227*1024 {
			t.Errorf("d%d %q: %d bytes of shared memory, more than an H100/H200 block may have", c.d, c.env, r.SharedMem)
		}
		a, err := New(nil, flex.DFlashMask(16), nil, Config{HeadDim: c.d, Group: 4})
		if err != nil {
			t.Fatal(err)
		}
		_, bsrc := a.Sources()
		prod := c.threads == 384
		if got := strings.Contains(bsrc, fmt.Sprintf("#define FLEX_BWD_NT %d\n", c.threads)); !got {
			t.Errorf("d%d %q: source lacks FLEX_BWD_NT %d", c.d, c.env, c.threads)
		}
		pre, err := gxx(t, bsrc) // the template's own #if must agree with bwdWS
		if err != nil {
			t.Fatalf("d%d %q: preprocessing: %v", c.d, c.env, err)
		}
		if got := strings.Contains(pre, "flex_tma_load3(qs.sQ"); got != prod {
			t.Errorf("d%d %q: producer's copies in the preprocessed source: %v, want %v", c.d, c.env, got, prod)
		}
		if got := a.Spec().bwdWS(); got != prod {
			t.Errorf("d%d %q: bwdWS %v, want %v", c.d, c.env, got, prod)
		}
	}
}

// TestBulkDQBackwardShape: FLEX_BWD_DQ_BULK=1, the default, gives the Hopper backward with
// a producer its dQ buffers (a 64-row fp32 tile of each consumer's columns),
// two Q/dO stages at head dim 128 (where three no longer fit), the copy
// engine's adds and the dQ accumulator's tensor map in the source, and one
// more kernel parameter; without the producer (FLEX_BWD_WS=0, head dim 256)
// the switch changes nothing. The sizes are worked out here from the
// template's layout, at 128 q blocks (the DFlash 8B case).
func TestBulkDQBackwardShape(t *testing.T) {
	t.Setenv("DFLASH_FLEX_FWD", "")
	t.Setenv("DFLASH_FLEX_BWD", "")
	const nqb = 128
	// smem is flex_bwd_wg.cuh's layout: K, V; st stages of Q, dO; two dS^T;
	// dQ buffers; st x (LSE, Dlt); 2 mbarriers per stage (ws); alignment; q block list.
	smem := func(d, st, dqBytes int, ws bool) int {
		mbar := 0
		if ws {
			mbar = 2 * st * 8
		}
		return (2*128*d+2*st*64*d+2*128*64)*2 + dqBytes + st*2*64*4 + mbar + 1024 + 8*nqb
	}
	for _, c := range []struct {
		d       int
		env     string
		bulk    bool
		stages  int
		threads int
		smem    int
	}{
		{128, "", true, 2, 384, smem(128, 2, 2*64*64*4, true)}, // the default
		{128, "FLEX_BWD_DQ_BULK=0", false, 3, 384, smem(128, 3, 0, true)},
		{128, "FLEX_BWD_DQ_BULK=1", true, 2, 384, smem(128, 2, 2*64*64*4, true)},
		{64, "FLEX_BWD_DQ_BULK=1", true, 3, 384, smem(64, 3, 2*64*32*4, true)},
		{64, "FLEX_BWD_DQ_BULK=1,FLEX_BWD_DQ_COLS=0", true, 3, 384, smem(64, 3, 2*64*64*4, true)},
		{128, "FLEX_BWD_WS=0,FLEX_BWD_DQ_BULK=1", false, 3, 256, smem(128, 3, 0, false)},
		{64, "FLEX_BWD_WS=0,FLEX_BWD_DQ_BULK=1", false, 3, 256, smem(64, 3, 0, false)},
		{256, "FLEX_BWD_DQ_BULK=1", false, 2, 256, 0},
	} {
		t.Setenv("DFLASH_FLEX_DEFINES", c.env)
		a, err := New(nil, flex.DFlashMask(16), flex.ALiBi(), Config{HeadDim: c.d, Group: 4})
		if err != nil {
			t.Fatal(err)
		}
		s := a.Spec()
		name := fmt.Sprintf("d%d %q", c.d, c.env)
		if s.bwdDQBulk() != c.bulk || s.bwdStages() != c.stages {
			t.Errorf("%s: bwdDQBulk %v, %d stages; want %v, %d", name, s.bwdDQBulk(), s.bwdStages(), c.bulk, c.stages)
		}
		r := BwdResources(s, nqb)
		if r.Threads != c.threads || c.smem > 0 && r.SharedMem != c.smem {
			t.Errorf("%s: %d threads, %d bytes; want %d, %d", name, r.Threads, r.SharedMem, c.threads, c.smem)
		}
		if r.SharedMem > 227*1024 {
			t.Errorf("%s: %d bytes of shared memory at %d q blocks, more than an H100/H200 block may have", name, r.SharedMem, nqb)
		}
		_, bsrc := a.Sources()
		if !strings.Contains(bsrc, fmt.Sprintf("#define FLEX_BWD_STAGES %d\n", c.stages)) {
			t.Errorf("%s: source lacks FLEX_BWD_STAGES %d", name, c.stages)
		}
		pre, err := gxx(t, bsrc) // the template's own #if must agree with bwdDQBulk
		if err != nil {
			t.Fatalf("%s: preprocessing: %v", name, err)
		}
		if got := strings.Contains(pre, "flex_tma_reduce3(&tmdQ"); got != c.bulk {
			t.Errorf("%s: the copy engine's dQ adds in the preprocessed source: %v, want %v", name, got, c.bulk)
		}
		if got := strings.Contains(pre, "flex_red2(gq"); got == c.bulk && c.d != 256 {
			t.Errorf("%s: the dQ atomics in the preprocessed source: %v, want %v", name, got, !c.bulk)
		}
		// The launch appends dkdvArgs parameters, then the slots: the kernel must take as many.
		i := strings.Index(pre, "flex_bwd_dkdv(")
		j := strings.Index(pre[i:], ")")
		if i < 0 || j < 0 {
			t.Fatalf("%s: no flex_bwd_dkdv parameter list in the preprocessed source", name)
		}
		params := strings.Count(pre[i:i+j], ",") + 1
		if want := s.dkdvArgs() + a.layout.slots(true); params != want {
			t.Errorf("%s: flex_bwd_dkdv takes %d parameters, the launch passes %d", name, params, want)
		}
	}
}
