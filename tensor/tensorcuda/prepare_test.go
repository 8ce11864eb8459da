package tensorcuda

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"dflash/cuda"
	"dflash/flex"
	"dflash/jit"
	"dflash/tensor"
)

// failingCompiler compiles with inner (a fake image when nil) every source
// but those of family fail, which fail as NVRTC does: an error and a log
// naming the line.
type failingCompiler struct {
	inner jit.Compiler
	fail  string
}

func (f failingCompiler) Version() string {
	if f.inner != nil {
		return f.inner.Version()
	}
	return "fake 1.0"
}

func (f failingCompiler) Compile(ctx context.Context, src jit.Source) ([]byte, string, error) {
	switch {
	case src.Family == f.fail:
		log := fmt.Sprintf("%s(7): error: identifier \"undefined_%s\" is undefined\n\n1 error detected in the compilation of %q.",
			src.ProgramName(), src.Family, src.ProgramName())
		return nil, log, &cuda.Error{Call: "nvrtcCompileProgram", Lib: "nvrtc", Code: 6, Name: "NVRTC_ERROR_COMPILATION"}
	case f.inner != nil:
		return f.inner.Compile(ctx, src)
	}
	return []byte("FAKECUBIN " + src.Family), "", nil
}

// preparedBackend is a fake backend (fakeBackend) that compiles its
// attention kernels for sm_90 through a memory-only cache whose compiler
// fails the sources of family fail.
func preparedBackend(t *testing.T, fail string) (*Backend, *jit.Cache) {
	cache, err := jit.New(jit.Config{Compiler: failingCompiler{fail: fail}})
	if err != nil {
		t.Fatal(err)
	}
	b, _, _, _ := fakeBackend()
	b.cache, b.arch = cache, "sm_90"
	return b, cache
}

// trainingUses are the attention calls of a DFlash training step: the
// target's causal forward and the drafter's DFlash forward and backward.
func trainingUses() []tensor.AttentionUse {
	return []tensor.AttentionUse{
		{Mask: flex.Causal(), HeadDim: 128, Group: 4},
		{Mask: flex.DFlashMask(16), HeadDim: 128, Group: 4, Backward: true},
	}
}

// TestPrepareCompileError: a kernel that fails to compile at Prepare is an
// error, not a panic, that names each failing kernel (the block mask
// builder of a mask, or an attention by mask, head dimension, group and
// direction), carries the compiler's log (a *jit.CompileError) and names
// no kernel that compiled.
func TestPrepareCompileError(t *testing.T) {
	for _, c := range []struct {
		fail         string
		want, notNow []string
	}{
		{"flex_fwd", []string{
			"attention with mask causal, head dim 128, group 4, forward: flexcuda: forward kernels:",
			"attention with mask dflash16, head dim 128, group 4, forward and backward: flexcuda: forward kernels:"},
			[]string{"backward kernels", "block mask builder"}},
		{"flex_bwd", []string{"attention with mask dflash16, head dim 128, group 4, forward and backward: flexcuda: backward kernels:"},
			[]string{"mask causal", "forward kernels", "block mask builder"}},
		{"flex_blockmask", []string{"the block mask builder of causal:", "the block mask builder of dflash16:"},
			[]string{"attention with"}},
	} {
		t.Run(c.fail, func(t *testing.T) {
			b, _ := preparedBackend(t, c.fail)
			var err error
			if p := panicText(func() { err = b.Prepare(context.Background(), trainingUses()) }); p != "" {
				t.Fatalf("Prepare panicked: %s", p)
			}
			if err == nil {
				t.Fatalf("Prepare with %s failing to compile returned no error", c.fail)
			}
			var ce *jit.CompileError
			if !errors.Is(err, jit.ErrCompile) || !errors.As(err, &ce) {
				t.Fatalf("error %v is not a jit.CompileError", err)
			}
			if ce.Family != c.fail || !strings.Contains(ce.Log, "undefined_"+c.fail) {
				t.Errorf("compile error of family %s with log %q, want %s's log", ce.Family, ce.Log, c.fail)
			}
			msg := err.Error()
			for _, w := range append(c.want, "compiler log:", "error: identifier \"undefined_"+c.fail+"\" is undefined") {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			for _, w := range c.notNow {
				if strings.Contains(msg, w) {
					t.Errorf("error names %q, which compiled:\n%s", w, msg)
				}
			}
		})
	}
}

// TestPrepareFillsTheCache: Prepare compiles each module a training step
// uses once (two builders, the causal forward, the DFlash forward and
// backward) into the tables the step's NewMask and Attention look up, so
// that neither a second Prepare nor those lookups compile again.
func TestPrepareFillsTheCache(t *testing.T) {
	b, cache := preparedBackend(t, "")
	ctx := context.Background()
	if err := b.Prepare(ctx, trainingUses()); err != nil {
		t.Fatal(err)
	}
	const modules = 5
	if st := cache.Stats(); st.Compiles != modules || st.Kernels != modules {
		t.Fatalf("Prepare compiled %d modules (%d kernels in the cache), want %d", st.Compiles, st.Kernels, modules)
	}
	if len(b.attns) != 2 || len(b.builders) != 2 {
		t.Fatalf("Prepare made %d attentions and %d builders, want 2 of each", len(b.attns), len(b.builders))
	}
	for _, u := range trainingUses() {
		a := b.attns[attnKey{u.Mask.Hash(), u.HeadDim, u.Group}]
		got, err := b.attention(u.Mask, u.HeadDim, u.Group) // what Attention looks up
		if err != nil || got != a || a == nil {
			t.Errorf("%s: the step's attention %p (%v) is not the prepared %p", u, got, err, a)
		}
		bl := b.builders[u.Mask.Hash()]
		gotB, err := b.builder(u.Mask) // what NewMask looks up
		if err != nil || gotB != bl || bl == nil {
			t.Errorf("%s: the step's builder %p (%v) is not the prepared %p", u, gotB, err, bl)
		}
		if err := a.Compile(ctx, b.arch, u.Backward); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Prepare(ctx, trainingUses()); err != nil {
		t.Fatal(err)
	}
	if st := cache.Stats(); st.Compiles != modules {
		t.Errorf("after a second Prepare and the step's lookups: %d compiles, want still %d", st.Compiles, modules)
	}
}

// TestPrepareScore: a score program, not yet on CUDA, is refused at
// Prepare, naming the use.
func TestPrepareScore(t *testing.T) {
	b, _ := preparedBackend(t, "")
	err := b.Prepare(context.Background(), []tensor.AttentionUse{{Mask: flex.Causal(), Score: flex.Softcap(30), HeadDim: 128, Group: 1}})
	if err == nil || !strings.Contains(err.Error(), "mask causal, score ") || !strings.Contains(err.Error(), "score programs are not yet on CUDA") {
		t.Fatalf("Prepare of a score program: %v", err)
	}
}
