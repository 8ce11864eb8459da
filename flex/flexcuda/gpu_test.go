package flexcuda

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/flex"
	"dflash/gpu"
	"dflash/internal/gputest"
)

// attnCase is one GPU correctness case: programs, static config, and random
// run-time shapes and arguments.
type attnCase struct {
	name  string
	mask  *flex.MaskProgram
	score *flex.ScoreProgram
	cfg   Config
	dims  func(r *rand.Rand) flex.Dims
	args  func(r *rand.Rand, d flex.Dims) *flex.Args
}

func square(b, hq, hkv, lo, hi, hd int) func(r *rand.Rand) flex.Dims {
	return func(r *rand.Rand) flex.Dims {
		l := lo + r.IntN(hi-lo+1)
		return flex.Dims{Batch: b, HeadsQ: hq, HeadsKV: hkv, LenQ: l, LenKV: l, HeadDim: hd}
	}
}

func noArgs(*rand.Rand, flex.Dims) *flex.Args { return flex.NewArgs() }

func docArgs(r *rand.Rand, d flex.Dims) *flex.Args {
	ids := make([]int32, d.Batch*d.LenQ)
	for b := 0; b < d.Batch; b++ {
		id := int32(0)
		for i := 0; i < d.LenQ; i++ {
			if r.IntN(120) == 0 {
				id++
			}
			ids[b*d.LenQ+i] = id
		}
	}
	return flex.NewArgs().SetIntTensor(flex.DocIDs, ids, d.Batch, d.LenQ)
}

func gpuCases() []attnCase {
	return []attnCase{
		{"causal/g2/d128/bf16", flex.Causal(), nil, Config{HeadDim: 128, Group: 2}, square(2, 4, 2, 200, 420, 128), noArgs},
		{"causal/lq!=lkv/d64/fp16", flex.Causal(), nil, Config{HeadDim: 64, DType: dtype.F16},
			func(r *rand.Rand) flex.Dims {
				return flex.Dims{Batch: 1, HeadsQ: 2, HeadsKV: 2, LenQ: 450 + r.IntN(100), LenKV: 600 + r.IntN(150), HeadDim: 64}
			}, noArgs},
		{"window77/g4/d256/bf16", flex.SlidingWindow(77), nil, Config{HeadDim: 256, Group: 4}, square(1, 8, 2, 300, 450, 256), noArgs},
		// head dim 256 without GQA (the v6 backward's two CTAs per kv block
		// write bf16 dK, dV directly), fp16, with a score program
		{"causal+softcap/d256/fp16", flex.Causal(), flex.SoftcapScalar(), Config{HeadDim: 256, DType: dtype.F16}, square(1, 2, 2, 280, 410, 256),
			func(r *rand.Rand, d flex.Dims) *flex.Args {
				return flex.NewArgs().SetFloat(flex.SoftcapName, 0.3+0.4*r.Float64())
			}},
		{"document/d128/bf16", flex.Document(true), nil, Config{HeadDim: 128}, square(2, 4, 4, 500, 700, 128), docArgs},
		{"dflash16/g4/padding/d128/bf16", flex.DFlashMask(16), nil, Config{HeadDim: 128, Group: 4},
			func(r *rand.Rand) flex.Dims { return flex.DFlashDims(2, 8, 2, 14+r.IntN(10), 16, 200+r.IntN(200), 128) },
			func(r *rand.Rand, d flex.Dims) *flex.Args {
				nb := d.LenQ / 16
				return dflashHostArgs(r, d.Batch, nb, d.LenKV-d.LenQ, true, 0)
			}},
		{"dflash16/g4/packed/d128/bf16", flex.DFlashMask(16), nil, Config{HeadDim: 128, Group: 4},
			func(r *rand.Rand) flex.Dims { return flex.DFlashDims(2, 8, 2, 14+r.IntN(10), 16, 200+r.IntN(200), 128) },
			func(r *rand.Rand, d flex.Dims) *flex.Args {
				return dflashHostArgs(r, d.Batch, d.LenQ/16, d.LenKV-d.LenQ, true, 4)
			}},
		{"prefixlm/g4/d64/fp16", flex.PrefixLM(), nil, Config{HeadDim: 64, Group: 4, DType: dtype.F16}, square(2, 4, 1, 200, 330, 64),
			func(r *rand.Rand, d flex.Dims) *flex.Args {
				p := make([]int32, d.Batch)
				for i := range p {
					p[i] = int32(r.IntN(d.LenQ))
				}
				return flex.NewArgs().SetIntTensor(flex.PrefixLen, p, d.Batch)
			}},
		{"causal+softcap/g2/d64/bf16", flex.Causal(), flex.SoftcapScalar(), Config{HeadDim: 64, Group: 2}, square(1, 4, 2, 250, 400, 64),
			func(r *rand.Rand, d flex.Dims) *flex.Args {
				return flex.NewArgs().SetFloat(flex.SoftcapName, 0.3+0.4*r.Float64())
			}},
		{"document+relbias8/d128/bf16", flex.Document(false), flex.RelativeBias(8), Config{HeadDim: 128}, square(1, 2, 2, 250, 350, 128),
			func(r *rand.Rand, d flex.Dims) *flex.Args {
				tab := make([]float64, d.HeadsQ*17)
				for i := range tab {
					tab[i] = 0.5 * r.NormFloat64()
				}
				return docArgs(r, d).SetFloatTensor(flex.RelBiasName, tab, d.HeadsQ, 17)
			}},
		{"causal+alibi/d64/fp16/bq64", flex.Causal(), flex.ALiBi(), Config{HeadDim: 64, DType: dtype.F16, BlockQ: 64}, square(1, 3, 3, 150, 300, 64),
			func(r *rand.Rand, d flex.Dims) *flex.Args {
				s := make([]float64, d.HeadsQ)
				for i := range s {
					s[i] = 0.01 + 0.09*r.Float64()
				}
				return flex.NewArgs().SetFloatTensor(flex.ALiBiSlopesName, s, d.HeadsQ)
			}},
	}
}

// TestGPUAttention compares forward and backward on the GPU with the CPU
// float64 reference on random shapes (lengths not multiples of the block,
// Lq != Lkv), GQA groups, head dims, dtypes, masks and score programs, with
// block masks built on the GPU; outputs are poisoned before each call and
// fully masked rows must give out 0, lse -Inf and dq 0 without NaN.
func TestGPUAttention(t *testing.T) {
	runGPUCases(t, gpuCases(), nil)
}

// runGPUCases compiles every case's kernels in parallel, then runs each case
// twice on random shapes against the CPU float64 reference (errors <= 1e-2,
// no problems), the second time with Out and DOut laid out heads inner
// (flex.Dims.OutHeadsInner); extra, when not nil, checks more of each result.
func runGPUCases(t *testing.T, cases []attnCase, extra func(t *testing.T, res *attnResult)) {
	w := gputest.Worker0(t)
	cache := gputest.NVRTCCache(t, "")
	r := newRand(t)
	type built struct {
		a *Attention
		b *Builder
	}
	bs := make([]built, len(cases))
	// Compile every kernel in parallel first: compiles need no device.
	var wg sync.WaitGroup
	errs := make([]error, 2*len(cases))
	arch := w.Info().Arch()
	start := time.Now()
	for i, c := range cases {
		a, err := New(cache, c.mask, c.score, c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, err := NewBuilder(cache, c.mask, a.spec.BlockQ, a.spec.BlockKV)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		bs[i] = built{a, b}
		wg.Add(2)
		go func() { defer wg.Done(); errs[2*i] = a.Compile(context.Background(), arch, true) }()
		go func() { defer wg.Done(); errs[2*i+1] = b.Compile(context.Background(), arch) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("compiled %d kernels in %v (parallel)", cache.Stats().Compiles, time.Since(start))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := w.Run(func(d *gpu.Device) error {
				infos, err := bs[i].a.Prepare(context.Background(), d, true)
				if err != nil {
					return err
				}
				t.Logf("spec %s", bs[i].a.Spec().Key())
				for _, k := range infos {
					t.Logf("%s: %d registers, %d local bytes, %d threads", k.Name, k.Registers, k.LocalBytes, k.Threads)
				}
				for rep := 0; rep < 2; rep++ {
					dims := c.dims(r)
					dims.OutHeadsInner = rep == 1
					res := runAttention(t, d, bs[i].a, bs[i].b, dims, c.args(r, dims), r)
					t.Logf("dims %+v: %s", dims, res)
					for _, p := range res.problems {
						t.Error(p)
					}
					for k, e := range res.errs {
						bound := 1e-2
						if k == "grad:"+flex.ALiBiSlopesName {
							// A head's slope gradient is one sum of dS·(k−q) over
							// its 1.5-3·10⁴ scores, whose terms cancel: their bf16
							// rounding leaves it 1.0-1.5e-2 from the float64 sum,
							// on every kernel.
							bound = 3e-2
						}
						if e > bound {
							t.Errorf("%s relative error %.3e > %.0e", k, e, bound)
						}
					}
					if extra != nil {
						extra(t, res)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGPUBlockMaskBuilders checks the GPU builders against flex.NewBlockMask
// list by list: the closed-form DFlash builder on random anchors (sorted or
// not, some past the context), padding and block sizes, and the generic
// builder on masks that read the batch, the head, tensors and nothing. It
// also times the DFlash builder at 512 anchors x 16, context 3072 (PyTorch's
// compiled create_block_mask: 0.27 ms).
func TestGPUBlockMaskBuilders(t *testing.T) {
	w := gputest.Worker0(t)
	cache := gputest.NVRTCCache(t, "")
	r := newRand(t)
	dfl := map[[2]int]*Builder{}
	for _, bq := range []int{64, 128} {
		b, err := NewDFlashBuilder(cache, 16, bq, 128)
		if err != nil {
			t.Fatal(err)
		}
		dfl[[2]int{16, bq}] = b
	}
	b8, err := NewDFlashBuilder(cache, 8, 128, 128)
	if err != nil {
		t.Fatal(err)
	}
	dfl[[2]int{8, 128}] = b8
	headMask := flex.NewMask("head_shift", flex.KV().Le(flex.Q().Add(flex.H().Mul(flex.Const(37)))))
	generic := []struct {
		mask *flex.MaskProgram
		args func(r *rand.Rand, d flex.Dims) *flex.Args
	}{
		{flex.Causal(), noArgs}, {flex.SlidingWindow(200), noArgs}, {flex.Document(true), docArgs}, {headMask, noArgs},
	}
	err = w.Run(func(d *gpu.Device) error {
		check := func(name string, bld *Builder, mask *flex.MaskProgram, dims flex.Dims, hargs *flex.Args) {
			dargs, err := UploadArgs(d, hargs)
			if err != nil {
				t.Fatal(err)
			}
			defer dargs.Free(d)
			gm, err := bld.Build(d, nil, dims, dargs, nil)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			defer gm.Free(d)
			cm, err := flex.NewBlockMask(mask, hargs, dims, bld.blockQ, bld.blockKV)
			if err != nil {
				t.Fatal(err)
			}
			h, err := gm.Download(d)
			if err != nil {
				t.Fatal(err)
			}
			if diff := h.Compare(gm, cm); diff != "" {
				t.Errorf("%s dims %+v: %s", name, dims, diff)
			}
		}
		for i := 0; i < 40; i++ {
			key := [][2]int{{16, 64}, {16, 128}, {8, 128}}[i%3]
			nb, ctx, batch := 1+r.IntN(40), 1+r.IntN(700), 1+r.IntN(3)
			dims := flex.DFlashDims(batch, 4, 2, nb, key[0], ctx, 64)
			check("dflash", dfl[key], flex.DFlashMask(key[0]), dims, dflashHostArgs(r, batch, nb, ctx, i%2 == 0, i%4))
		}
		for _, gc := range generic {
			bld, err := NewBuilder(cache, gc.mask, 128, 128)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 4; i++ {
				dims := flex.Dims{Batch: 1 + r.IntN(3), HeadsQ: 3, HeadsKV: 1, LenQ: 1 + r.IntN(900), LenKV: 1 + r.IntN(900), HeadDim: 64}
				check(gc.mask.String(), bld, gc.mask, dims, gc.args(r, dims))
			}
		}
		// The DFlash builder generic and closed-form on the same inputs.
		gd, err := NewBuilder(cache, flex.DFlashMask(16), 128, 128)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			nb, ctx := 1+r.IntN(60), 1+r.IntN(900)
			dims := flex.DFlashDims(2, 4, 2, nb, 16, ctx, 64)
			check("dflash generic", gd, flex.DFlashMask(16), dims, dflashHostArgs(r, 2, nb, ctx, i%2 == 0, 3))
		}
		// Timing at the size.
		dims := flex.DFlashDims(1, 32, 8, 512, 16, 3072, 128)
		hargs := dflashHostArgs(r, 1, 512, 3072, true, 0)
		for _, x := range []struct {
			name string
			bld  *Builder
		}{{"closed form", dfl[[2]int{16, 128}]}, {"generic", gd}} {
			ms, err := timeBuild(d, x.bld, dims, hargs, 50)
			if err != nil {
				return err
			}
			t.Logf("DFlash block mask 512x16, ctx 3072 on the GPU (%s builder): median %.4f ms (PyTorch compiled create_block_mask: 0.27 ms)", x.name, ms)
			if x.name == "closed form" && ms > 0.27 {
				t.Errorf("closed-form DFlash builder takes %.4f ms, more than PyTorch's 0.27 ms", ms)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGPUDFlashPackedBuilders checks the closed-form DFlash builder on
// context rows packed with 2 to 6 conversations (block starts those of the
// anchors' conversations; with unsorted anchors some starts arbitrary) and
// padding, list by list, against flex.NewBlockMask and so does the generic
// GPU builder of the same program on the same device arguments: draft
// blocks of 16 and 8, q blocks of 64 and 128.
func TestGPUDFlashPackedBuilders(t *testing.T) {
	w := gputest.Worker0(t)
	cache := gputest.NVRTCCache(t, "")
	r := newRand(t)
	type builders struct {
		bs, bq          int
		closed, generic *Builder
	}
	var all []builders
	for _, k := range [][2]int{{16, 64}, {16, 128}, {8, 128}} {
		cf, err := NewDFlashBuilder(cache, k[0], k[1], 128)
		if err != nil {
			t.Fatal(err)
		}
		gb, err := NewBuilder(cache, flex.DFlashMask(k[0]), k[1], 128)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, builders{k[0], k[1], cf, gb})
	}
	err := w.Run(func(d *gpu.Device) error {
		for i := 0; i < 36; i++ {
			x := all[i%len(all)]
			batch, nb, ctx := 1+r.IntN(3), 1+r.IntN(60), 2+r.IntN(900)
			dims := flex.DFlashDims(batch, 4, 2, nb, x.bs, ctx, 64)
			hargs := dflashHostArgs(r, batch, nb, ctx, i%3 != 0, 2+r.IntN(5))
			cm, err := flex.NewBlockMask(flex.DFlashMask(x.bs), hargs, dims, x.bq, 128)
			if err != nil {
				return err
			}
			dargs, err := UploadArgs(d, hargs)
			if err != nil {
				return err
			}
			for _, b := range []struct {
				name string
				bld  *Builder
			}{{"closed form", x.closed}, {"generic", x.generic}} {
				gm, err := b.bld.Build(d, nil, dims, dargs, nil)
				if err != nil {
					dargs.Free(d)
					return fmt.Errorf("%s builder: %w", b.name, err)
				}
				h, err := gm.Download(d)
				if err == nil {
					if diff := h.Compare(gm, cm); diff != "" {
						t.Errorf("%s builder, draft block %d, q block %d, dims %+v, block starts %v: %s",
							b.name, x.bs, x.bq, dims, hargs.IntTensors[flex.DFlashStarts].Data, diff)
					}
				}
				gm.Free(d)
				if err != nil {
					dargs.Free(d)
					return err
				}
			}
			dargs.Free(d)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// timeBuild returns the median time of reps builds in milliseconds.
func timeBuild(d *gpu.Device, bld *Builder, dims flex.Dims, hargs *flex.Args, reps int) (float64, error) {
	dargs, err := UploadArgs(d, hargs)
	if err != nil {
		return 0, err
	}
	defer dargs.Free(d)
	var m *BlockMask
	tm, err := d.Time(3, reps, func() error {
		m, err = bld.Build(d, nil, dims, dargs, m)
		return err
	})
	if m != nil {
		m.Free(d)
	}
	if err != nil {
		return 0, err
	}
	return float64(tm.Median()) / float64(time.Millisecond), nil
}

// TestGPUSpecialisationStable runs 100 DFlash attention calls (mask built on
// the GPU, forward and backward) with varying batch, anchor counts, context
// lengths, anchors and Out layouts, and checks that the kernel cache
// compiled exactly the static specialisations: one forward, one backward and
// one builder.
func TestGPUSpecialisationStable(t *testing.T) {
	w := gputest.Worker0(t)
	cache := gputest.NVRTCCache(t, "")
	r := newRand(t)
	a, err := New(cache, flex.DFlashMask(16), nil, Config{HeadDim: 64, Group: 2})
	if err != nil {
		t.Fatal(err)
	}
	bld, err := NewDFlashBuilder(cache, 16, 128, 128)
	if err != nil {
		t.Fatal(err)
	}
	before := cache.Stats().Compiles
	shapes := map[[3]int]bool{}
	err = w.Run(func(d *gpu.Device) error {
		for i := 0; i < 100; i++ {
			batch, nb, ctx := 1+r.IntN(3), 1+r.IntN(48), 16+r.IntN(600)
			shapes[[3]int{batch, nb, ctx}] = true
			dims := flex.DFlashDims(batch, 4, 2, nb, 16, ctx, 64)
			dims.OutHeadsInner = i%20 >= 10 // a run-time argument: no compile of its own
			hargs := dflashHostArgs(r, batch, nb, ctx, true, 0)
			if i%10 == 0 { // every tenth call checked against the CPU
				res := runAttention(t, d, a, bld, dims, hargs, r)
				for _, p := range res.problems {
					t.Errorf("call %d: %s", i, p)
				}
				for k, e := range res.errs {
					if e > 1e-2 {
						t.Errorf("call %d dims %+v: %s relative error %.3e", i, dims, k, e)
					}
				}
				continue
			}
			if err := quickCall(d, a, bld, dims, hargs); err != nil {
				return err
			}
		}
		return d.Synchronize()
	})
	if err != nil {
		t.Fatal(err)
	}
	st := cache.Stats()
	t.Logf("100 calls over %d distinct (batch, anchors, context) shapes: %d compiles; families %v", len(shapes), st.Compiles-before, st.Families)
	if got := st.Compiles - before; got != 3 {
		t.Errorf("%d compiles for 100 calls, want 3 (forward, backward, builder)", got)
	}
	for _, f := range []string{"flex_fwd", "flex_bwd", "flex_blockmask"} {
		if st.Families[f] != 1 {
			t.Errorf("family %s has %d kernels, want 1", f, st.Families[f])
		}
	}
}

// quickCall runs one forward and backward on random data without checking.
func quickCall(d *gpu.Device, a *Attention, bld *Builder, dims flex.Dims, hargs *flex.Args) error {
	nq := int64(dims.Batch*dims.HeadsQ*dims.LenQ) * int64(dims.HeadDim)
	nk := int64(dims.Batch*dims.HeadsKV*dims.LenKV) * int64(dims.HeadDim)
	var bufs []gpu.Buffer
	alloc := func(n int64) gpu.Buffer {
		b, err := d.Alloc(n)
		if err != nil {
			panic(err)
		}
		if err := d.Memset(b, 0x3c, nil); err != nil { // 0x3c3c: about 1.1 in bf16
			panic(err)
		}
		bufs = append(bufs, b)
		return b
	}
	defer func() {
		for _, b := range bufs {
			d.Free(b)
		}
	}()
	dargs, err := UploadArgs(d, hargs)
	if err != nil {
		return err
	}
	defer dargs.Free(d)
	m, err := bld.Build(d, nil, dims, dargs, nil)
	if err != nil {
		return err
	}
	defer m.Free(d)
	c := &Call{Dims: dims, Mask: m, Args: dargs, Q: alloc(2 * nq), K: alloc(2 * nk), V: alloc(2 * nk), Out: alloc(2 * nq),
		LSE: alloc(nq / int64(dims.HeadDim) * 4), DOut: alloc(2 * nq), DQ: alloc(2 * nq), DK: alloc(2 * nk), DV: alloc(2 * nk)}
	if err := a.Forward(d, c); err != nil {
		return err
	}
	if err := a.Backward(d, c); err != nil {
		return err
	}
	return d.Synchronize()
}

// TestGPULimitsAndArgErrors checks the errors that replace a launch: a
// shared-memory need over the device's limit names the limit, and a
// missing program argument is named.
func TestGPULimitsAndArgErrors(t *testing.T) {
	w := gputest.Worker0(t)
	cache := gputest.NVRTCCache(t, "")
	a, err := New(cache, flex.Document(true), nil, Config{HeadDim: 64})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Run(func(d *gpu.Device) error {
		st, err := a.device(context.Background(), d, false)
		if err != nil {
			return err
		}
		if err := st.fwd.ensureSmem(d.Info().SharedPerBlockOptin + 1); err == nil || !strings.Contains(err.Error(), "shared-memory limit") {
			t.Errorf("over the shared-memory limit: got %v", err)
		}
		dims := flex.Dims{Batch: 1, HeadsQ: 1, HeadsKV: 1, LenQ: 100, LenKV: 100, HeadDim: 64}
		m := blockMaskShape(dims, 128, 128, 1, 1)
		if err := m.alloc(d, nil); err != nil {
			return err
		}
		defer m.Free(d)
		buf, err := d.Alloc(1 << 16)
		if err != nil {
			return err
		}
		defer d.Free(buf)
		c := &Call{Dims: dims, Mask: m, Args: NewArgs(), Q: buf, K: buf, V: buf, Out: buf, LSE: buf}
		if err := a.Forward(d, c); err == nil || !strings.Contains(err.Error(), flex.DocIDs) {
			t.Errorf("missing %q: got %v", flex.DocIDs, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = cuda.MaxKernelArgs
}
