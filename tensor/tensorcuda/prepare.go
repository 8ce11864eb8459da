package tensorcuda

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"dflash/flex/flexcuda"
	"dflash/tensor"
)

// Prepare compiles and loads, before a run's first step, every kernel
// that its steps launch: the op kernels of both storage dtypes (Ops.Warm)
// and, for each use, the block-mask builder of its mask and its
// attention's forward kernels, with the backward kernels when the use has
// a backward. They go into the tables that NewMask, Attention and
// AttentionBackward look up, so that a step after Prepare compiles
// nothing. The builders' and attentions' modules compile at once, a
// goroutine each, and then load on the worker thread.
//
// A kernel that cannot be compiled is an error that names it (the op
// kernel and dtype; the use's mask, head dimension, group and direction)
// and wraps the *jit.CompileError with the NVRTC log; a score program, not
// yet on CUDA, is an error too. Call it after SetDeterministic, which
// refuses once an attention exists (Prepare makes them).
//
// GEMM plans are not prepared: cuBLASLt plans a product per shape, and a
// step's shapes are known only from its batch (the rows of the loss
// chunks are the batch's labelled slots, the lengths the batch's own
// without buckets); with tuning on, a plan is timed on the call's own
// operands. A plan that fails is a cuBLASLt error, not a compile.
func (b *Backend) Prepare(ctx context.Context, uses []tensor.AttentionUse) error {
	for _, o := range []*Ops{b.bf, b.f32} {
		if err := o.Warm(ctx); err != nil {
			return fmt.Errorf("tensorcuda: prepare the op kernels: %w", err)
		}
	}
	type prep struct {
		use tensor.AttentionUse
		bl  *flexcuda.Builder
		a   *flexcuda.Attention
	}
	preps := make([]prep, len(uses))
	for i, u := range uses {
		if u.Score != nil {
			return fmt.Errorf("tensorcuda: prepare attention with %s: score programs are not yet on CUDA; use the CPU backend", u)
		}
		bl, err := b.builder(u.Mask)
		if err != nil {
			return err
		}
		a, err := b.attention(u.Mask, u.HeadDim, u.Group)
		if err != nil {
			return fmt.Errorf("tensorcuda: prepare attention with %s: %w", u, err)
		}
		preps[i] = prep{u, bl, a}
	}
	errs := make([]error, 2*len(preps))
	var wg sync.WaitGroup
	for i, p := range preps {
		wg.Go(func() {
			if err := p.bl.Compile(ctx, b.arch); err != nil {
				errs[2*i] = fmt.Errorf("tensorcuda: prepare the block mask builder of %s: %w", p.use.Mask.Name(), err)
			}
		})
		wg.Go(func() {
			if err := p.a.Compile(ctx, b.arch, p.use.Backward); err != nil {
				errs[2*i+1] = fmt.Errorf("tensorcuda: prepare attention with %s: %w", p.use, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if b.d == nil {
		return nil // the CPU tests' fake device: compiled, nothing to load
	}
	for _, p := range preps {
		if _, err := p.bl.Prepare(ctx, b.d); err != nil {
			return fmt.Errorf("tensorcuda: prepare the block mask builder of %s: %w", p.use.Mask.Name(), err)
		}
		if _, err := p.a.Prepare(ctx, b.d, p.use.Backward); err != nil {
			return fmt.Errorf("tensorcuda: prepare attention with %s: %w", p.use, err)
		}
	}
	return nil
}
