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
// nothing. Every module compiles at once, a goroutine each (Compile's
// work: after a Compile of the same uses it finds them all in the kernel
// cache), and then loads on the worker thread.
//
// A kernel that cannot be compiled is an error that names it (the op
// kernel file and dtype; the use's mask, head dimension, group and
// direction) and wraps the *jit.CompileError with the NVRTC log; a score
// program, not yet on CUDA, is an error too. Call it after
// SetDeterministic, which refuses once an attention exists (Prepare makes
// them).
//
// GEMM plans are not prepared: cuBLASLt plans a product per shape, and a
// step's shapes are known only from its batch (the rows of the loss
// chunks are the batch's labelled slots, the lengths the batch's own
// without buckets); with tuning on, a plan is timed on the call's own
// operands. A plan that fails is a cuBLASLt error, not a compile.
func (b *Backend) Prepare(ctx context.Context, uses []tensor.AttentionUse) error {
	preps, err := b.preps(uses, true)
	if err != nil {
		return err
	}
	if err := b.compile(ctx, preps); err != nil {
		return err
	}
	for _, o := range []*Ops{b.bf, b.f32} {
		if err := o.Warm(ctx); err != nil {
			return fmt.Errorf("tensorcuda: prepare the op kernels: %w", err)
		}
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

// Compile is Prepare's compile part, for another goroutine than the
// worker's: it compiles every module that Prepare of uses loads (the op
// kernels of both dtypes, each use's block-mask builder and attention),
// or finds it in the kernel cache's memory or disk tier, all at once, and
// loads none, so that the Prepare that follows only loads. It makes its
// own builders and attentions and reads only what the backend was made
// with (the cache, the device's architecture, SetDeterministic's choice):
// it may run while the worker uses the backend, a target's load for
// instance, so that the start costs the longer of the two rather than
// their sum. Call it after SetDeterministic. Its errors are Prepare's.
func (b *Backend) Compile(ctx context.Context, uses []tensor.AttentionUse) error {
	preps, err := b.preps(uses, false)
	if err != nil {
		return err
	}
	return b.compile(ctx, preps)
}

// prep is an attention use with its mask's builder and its attention.
type prep struct {
	use tensor.AttentionUse
	bl  *flexcuda.Builder
	a   *flexcuda.Attention
}

// preps returns each use with its builder and attention: those of the
// backend's tables with kept (Prepare: what the steps look up), made anew
// otherwise (Compile: the tables are the worker's).
func (b *Backend) preps(uses []tensor.AttentionUse, kept bool) ([]prep, error) {
	builder, attention := b.newBuilder, b.newAttention
	if kept {
		builder, attention = b.builder, b.attention
	}
	out := make([]prep, len(uses))
	for i, u := range uses {
		if u.Score != nil {
			return nil, fmt.Errorf("tensorcuda: prepare attention with %s: score programs are not yet on CUDA; use the CPU backend", u)
		}
		bl, err := builder(u.Mask)
		if err != nil {
			return nil, err
		}
		a, err := attention(u.Mask, u.HeadDim, u.Group)
		if err != nil {
			return nil, fmt.Errorf("tensorcuda: prepare attention with %s: %w", u, err)
		}
		out[i] = prep{u, bl, a}
	}
	return out, nil
}

// compile compiles the op kernels of both dtypes (the device's runners;
// the CPU tests' fake ops have none) and every builder and attention of
// preps, a goroutine each, loading nothing.
func (b *Backend) compile(ctx context.Context, preps []prep) error {
	errs := make([]error, 2+2*len(preps))
	var wg sync.WaitGroup
	for i, o := range []*Ops{b.bf, b.f32} {
		if r, ok := o.run.(*devRunner); ok {
			wg.Go(func() {
				if err := r.compile(ctx); err != nil {
					errs[i] = fmt.Errorf("tensorcuda: prepare the op kernels: %w", err)
				}
			})
		}
	}
	for i, p := range preps {
		wg.Go(func() {
			if err := p.bl.Compile(ctx, b.arch); err != nil {
				errs[2+2*i] = fmt.Errorf("tensorcuda: prepare the block mask builder of %s: %w", p.use.Mask.Name(), err)
			}
		})
		wg.Go(func() {
			if err := p.a.Compile(ctx, b.arch, p.use.Backward); err != nil {
				errs[2+2*i+1] = fmt.Errorf("tensorcuda: prepare attention with %s: %w", p.use, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
