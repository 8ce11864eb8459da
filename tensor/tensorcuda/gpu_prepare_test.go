package tensorcuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"dflash/dtype"
	"dflash/flex"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
	"dflash/jit"
	"dflash/tensor"
)

// TestGPUPrepareThenStep: after Prepare of a training step's attention
// uses (trainingUses), the step itself (the causal forward, the DFlash
// forward and backward, their block masks, and the op kernels) compiles
// nothing and loads no module: the kernel cache's compiles, keys and module
// loads stay as Prepare left them. The cache is a fresh one in memory, so
// that every kernel is compiled by this test.
func TestGPUPrepareThenStep(t *testing.T) {
	w := gputest.Worker0(t)
	cache := gputest.NVRTCCache(t, "")
	r := testseed.New(t)
	err := gputest.RunBackend(w, cache, NewBackend, func(_ *gpu.Device, b *Backend) error {
		if err := b.Prepare(context.Background(), trainingUses()); err != nil {
			return err
		}
		before := cache.Stats()
		if before.Compiles == 0 {
			return errors.New("Prepare compiled nothing")
		}
		random := func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			return x
		}
		shapes := func(d flex.Dims) ([]int, []int, [][]float32) {
			qn, kn := d.Batch*d.HeadsQ*d.LenQ*d.HeadDim, d.Batch*d.HeadsKV*d.LenKV*d.HeadDim
			return []int{d.Batch, d.HeadsQ, d.LenQ, d.HeadDim}, []int{d.Batch, d.HeadsKV, d.LenKV, d.HeadDim},
				[][]float32{random(qn), random(kn), random(kn), random(qn)}
		}
		// The target's forward: causal, no gradients.
		cd := flex.Dims{Batch: 2, HeadsQ: 8, HeadsKV: 2, LenQ: 200, LenKV: 200, HeadDim: 128}
		qs, ks, vals := shapes(cd)
		m, err := b.NewMask(flex.Causal(), flex.NewArgs(), cd)
		if err != nil {
			return err
		}
		tp := tensor.NewTape(b)
		x := tensor.FromStorage("x", b.Upload(vals[0], false), qs...)
		tp.RMSNorm(x, tensor.FromStorage("w", b.Upload(random(cd.HeadDim), false), cd.HeadDim), 1e-6)
		tp.Attention(x, tensor.FromStorage("k", b.Upload(vals[1], false), ks...), tensor.FromStorage("v", b.Upload(vals[2], false), ks...),
			m, nil, 1/math.Sqrt(float64(cd.HeadDim)))
		// The drafter's forward and backward: DFlash blocks of 16.
		blocks, ctxLen := 3, 150
		dd := flex.DFlashDims(2, 8, 2, blocks, 16, ctxLen, 128)
		qs, ks, vals = shapes(dd)
		args := flex.DFlashArgs(ctxLen, []int32{20, 77, 140, 5, 60, 149}, nil, blocks, []int32{3, 2})
		if _, err := attnThrough[float32](b, flex.DFlashMask(16), args, dd, qs, ks, vals, 1/math.Sqrt(128)); err != nil {
			return err
		}
		if err := b.Sync(); err != nil {
			return err
		}
		after := cache.Stats()
		if after.Compiles != before.Compiles || after.Kernels != before.Kernels || after.ModuleLoads != before.ModuleLoads {
			return fmt.Errorf("the step after Prepare compiled %d, added %d kernels and loaded %d modules; want none",
				after.Compiles-before.Compiles, after.Kernels-before.Kernels, after.ModuleLoads-before.ModuleLoads)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGPUAttentionUnprepared: an attention kernel that was not prepared
// and fails to compile at its first call panics with an error naming the
// kernel (the op, the direction, the mask, the head dimension and the
// group) that wraps the *jit.CompileError with the compiler's log.
func TestGPUAttentionUnprepared(t *testing.T) {
	w := gputest.Worker0(t)
	nv, err := jit.NewNVRTC()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	cache, err := jit.New(jit.Config{Compiler: failingCompiler{inner: nv, fail: "flex_fwd"}})
	if err != nil {
		t.Fatal(err)
	}
	var got any
	err = gputest.RunBackend(w, cache, NewBackend, func(_ *gpu.Device, b *Backend) error {
		dims := flex.Dims{Batch: 1, HeadsQ: 4, HeadsKV: 1, LenQ: 64, LenKV: 64, HeadDim: 128}
		m, err := b.NewMask(flex.Causal(), flex.NewArgs(), dims)
		if err != nil {
			return err
		}
		q, kv := b.Alloc(4*64*128), b.Alloc(64*128)
		func() {
			defer func() { got = recover() }()
			b.Attention(dims, q, kv, kv, m, nil, 1/math.Sqrt(128))
		}()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	perr, ok := got.(error)
	if !ok {
		t.Fatalf("Attention with a failing compile: panic %v (%T), want an error", got, got)
	}
	var ce *jit.CompileError
	if !errors.As(perr, &ce) || !strings.Contains(ce.Log, "undefined_flex_fwd") {
		t.Fatalf("panic %v does not wrap the compile error with its log", perr)
	}
	for _, w := range []string{"tensorcuda: Attention: forward kernels of mask causal, head dim 128, group 4:", "compiler log:"} {
		if !strings.Contains(perr.Error(), w) {
			t.Errorf("panic lacks %q:\n%v", w, perr)
		}
	}
}

// TestGPUCompileWhileLoading: Compile on another goroutine while the
// worker uploads parameters (a target's load) compiles every module of the
// training step's uses and of the op kernels, and the Prepare after it
// compiles nothing and only loads them: the start costs the longer of the
// load and the compile. The cache is a fresh one in memory.
func TestGPUCompileWhileLoading(t *testing.T) {
	w := gputest.Worker0(t)
	cache := gputest.NVRTCCache(t, "")
	err := gputest.RunBackend(w, cache, NewBackend, func(_ *gpu.Device, b *Backend) error {
		ctx := context.Background()
		base := cache.Stats()
		compiled := make(chan error, 1)
		go func() { compiled <- b.Compile(ctx, trainingUses()) }()
		const n = 64 << 20 // 128 MiB of bf16, in pieces as a load writes them
		_, compute := b.AllocParams(n, false)
		raw := make([]byte, 2*n/16)
		for i := range raw {
			raw[i] = byte(i)
		}
		for off := 0; off < n; off += n / 16 {
			b.WriteParamBytes(compute.Slice(off, off+n/16), dtype.BF16, raw)
		}
		if err := <-compiled; err != nil {
			return err
		}
		before := cache.Stats()
		if before.Compiles == base.Compiles || before.ModuleLoads != base.ModuleLoads {
			return fmt.Errorf("Compile compiled %d modules and loaded %d: want some compiled, none loaded",
				before.Compiles-base.Compiles, before.ModuleLoads-base.ModuleLoads)
		}
		if err := b.Prepare(ctx, trainingUses()); err != nil {
			return err
		}
		after := cache.Stats()
		if after.Compiles != before.Compiles || after.ModuleLoads == before.ModuleLoads {
			return fmt.Errorf("Prepare after Compile compiled %d modules and loaded %d: want none compiled, the modules loaded",
				after.Compiles-before.Compiles, after.ModuleLoads-before.ModuleLoads)
		}
		return b.Sync()
	})
	if err != nil {
		t.Fatal(err)
	}
}
