package flexcuda

import (
	"fmt"
	"strings"
	"testing"

	"dflash/flex"
	"dflash/internal/switches"
	"dflash/internal/testerr"
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
			if testerr.Want(t, err, c.errSubstring) {
				return
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
// the shared-memory sizes their templates define, at 10 q and kv blocks.
func TestResourcesHopper(t *testing.T) {
	for _, c := range []struct {
		spec            Spec
		fwdSmem, fwdThr int
		bwdSmem, bwdThr int
	}{
		// Q, 2 stages of K and V tiles of 128 rows, 1+4x2 mbarriers, 1024 alignment, 8 per kv block; a producer warpgroup.
		// Backward: K, V of 128 rows, 2 stages of Q and dO of 64 rows, two dS^T 128x64, the two consumers'
		// fp32 dQ tiles of 64x64, 2 x (LSE, Dlt) of 64, 2 mbarriers per stage, alignment, 8 per q block; the producer.
		{Spec{HeadDim: 128, Group: 1, BlockQ: 128, BlockKV: 128, Fwd: Hopper, Bwd: Hopper}, (128+2*2*128)*128*2 + 8*9 + 1024 + 8*10, 384,
			(2*128*128+4*64*128+2*128*64)*2 + 2*64*64*4 + 16*64 + 2*2*8 + 1024 + 8*10, 384},
		// head dim 64: 4 stages; backward 3 stages, dQ tiles of 64x32
		{Spec{HeadDim: 64, Group: 4, BlockQ: 128, BlockKV: 128, Fwd: Hopper, Bwd: Hopper}, (128+2*4*128)*64*2 + 8*17 + 1024 + 8*10, 384,
			(2*128*64+6*64*64+2*128*64)*2 + 2*64*32*4 + 24*64 + 2*3*8 + 1024 + 8*10, 384},
		// head dim 256: kv tiles of 64 rows; q block 64 is one consumer warpgroup;
		// backward q tiles of 32 rows in 2 stages, one dS^T buffer, no producer, dQ by atomics
		{Spec{HeadDim: 256, Group: 2, BlockQ: 64, BlockKV: 128, Fwd: Hopper, Bwd: Hopper}, (64+2*2*64)*256*2 + 8*9 + 1024 + 8*10, 256,
			(2*128*256+2*2*32*256+128*64)*2 + 4*32*4 + 1024 + 8*10, 256},
	} {
		f := FwdResources(c.spec, 10)
		if f.SharedMem != c.fwdSmem || f.Threads != c.fwdThr {
			t.Errorf("%s: forward %d bytes, %d threads; want %d, %d", c.spec.Key(), f.SharedMem, f.Threads, c.fwdSmem, c.fwdThr)
		}
		b := BwdResources(c.spec, 10)
		if b.SharedMem != c.bwdSmem || b.Threads != c.bwdThr {
			t.Errorf("%s: backward %d bytes, %d threads; want %d, %d", c.spec.Key(), b.SharedMem, b.Threads, c.bwdSmem, c.bwdThr)
		}
		if f.SharedMem > 227*1024 || b.SharedMem > 227*1024 {
			t.Errorf("%s: %d / %d bytes, more than an H100/H200 block may have", c.spec.Key(), f.SharedMem, b.SharedMem)
		}
	}
}

// TestHopperBackwardShape: the Hopper backward at head dims 64 and 128 has
// a producer warpgroup (384 threads, two mbarriers per Q/dO stage, TMA
// copies in the source) and adds dQ through its buffers (a 64-row fp32 tile
// of each consumer's columns: 32 at head dim 64, 64 at 128) by the copy
// engine, with two Q/dO stages at head dim 128 (where three no longer fit),
// the dQ accumulator's tensor map in the source and one more kernel
// parameter; head dim 256 has neither, and adds dQ by atomics. The sizes are
// worked out here from the template's layout, at 128 q blocks (the DFlash 8B
// case).
func TestHopperBackwardShape(t *testing.T) {
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
		prod    bool // the producer and the copy engine's dQ adds
		stages  int
		threads int
		smem    int
	}{
		{128, true, 2, 384, smem(128, 2, 2*64*64*4, true)},
		{64, true, 3, 384, smem(64, 3, 2*64*32*4, true)},
		{256, false, 2, 256, 0},
	} {
		a, err := New(nil, flex.DFlashMask(16), flex.ALiBi(), Config{HeadDim: c.d, Group: 4})
		if err != nil {
			t.Fatal(err)
		}
		s := a.Spec()
		name := fmt.Sprintf("d%d", c.d)
		if s.bwdWS() != c.prod || s.bwdDQBulk() != c.prod || s.bwdStages() != c.stages {
			t.Errorf("%s: bwdWS %v, bwdDQBulk %v, %d stages; want %v, %v, %d", name, s.bwdWS(), s.bwdDQBulk(), s.bwdStages(), c.prod, c.prod, c.stages)
		}
		r := BwdResources(s, nqb)
		if r.Threads != c.threads || c.smem > 0 && r.SharedMem != c.smem {
			t.Errorf("%s: %d threads, %d bytes; want %d, %d", name, r.Threads, r.SharedMem, c.threads, c.smem)
		}
		if r.SharedMem > 227*1024 {
			t.Errorf("%s: %d bytes of shared memory at %d q blocks, more than an H100/H200 block may have", name, r.SharedMem, nqb)
		}
		_, bsrc := a.Sources()
		for _, def := range []string{fmt.Sprintf("#define FLEX_BWD_STAGES %d\n", c.stages), fmt.Sprintf("#define FLEX_BWD_NT %d\n", c.threads)} {
			if !strings.Contains(bsrc, def) {
				t.Errorf("%s: source lacks %q", name, def)
			}
		}
		pre, err := gxx(t, bsrc) // the template's own #if must agree with bwdWS and bwdDQBulk
		if err != nil {
			t.Fatalf("%s: preprocessing: %v", name, err)
		}
		if got := strings.Contains(pre, "flex_tma_load3(qs.sQ"); got != c.prod {
			t.Errorf("%s: producer's copies in the preprocessed source: %v, want %v", name, got, c.prod)
		}
		if got := strings.Contains(pre, "flex_tma_reduce3(&tmdQ"); got != c.prod {
			t.Errorf("%s: the copy engine's dQ adds in the preprocessed source: %v, want %v", name, got, c.prod)
		}
		if got := strings.Contains(pre, "flex_red2(gq"); got == c.prod {
			t.Errorf("%s: the dQ atomics in the preprocessed source: %v, want %v", name, got, !c.prod)
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
