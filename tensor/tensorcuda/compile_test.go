package tensorcuda

import (
	"context"
	"errors"
	"strings"
	"testing"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/jit"
)

// TestCompileThenPrepare: Compile, run on another goroutine while the
// worker writes parameters, compiles every module of a training step's
// uses (two builders, the causal forward, the DFlash forward and
// backward) without touching the tables the steps look up; the Prepare
// after it compiles nothing more and fills those tables.
func TestCompileThenPrepare(t *testing.T) {
	b, cache := preparedBackend(t, "")
	ctx := context.Background()
	done := make(chan error)
	go func() { done <- b.Compile(ctx, trainingUses()) }()
	_, compute := b.AllocParams(1<<12, false) // the worker's own work meanwhile
	b.WriteParams(compute, make([]float32, 1<<12))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	const modules = 5
	if st := cache.Stats(); st.Compiles != modules {
		t.Fatalf("Compile compiled %d modules, want %d", st.Compiles, modules)
	}
	if len(b.attns) != 0 || len(b.builders) != 0 {
		t.Fatalf("Compile left %d attentions and %d builders in the worker's tables, want none", len(b.attns), len(b.builders))
	}
	if err := b.Prepare(ctx, trainingUses()); err != nil {
		t.Fatal(err)
	}
	if st := cache.Stats(); st.Compiles != modules {
		t.Errorf("Prepare after Compile compiled %d more modules, want none", st.Compiles-modules)
	}
	if len(b.attns) != 2 || len(b.builders) != 2 {
		t.Errorf("Prepare made %d attentions and %d builders, want 2 of each", len(b.attns), len(b.builders))
	}
}

// TestCompileOpKernels: with the device's runners (here without a device:
// nothing is loaded), Compile compiles every op kernel file for both
// storage dtypes besides the attention modules, and a file that fails is
// an error naming it and the dtype, with the compiler's log.
func TestCompileOpKernels(t *testing.T) {
	files := kernelFiles()
	for _, fail := range []string{"", "op_xent"} {
		b, cache := preparedBackend(t, fail)
		for _, o := range []**Ops{&b.bf, &b.f32} {
			dt := (*o).dt
			*o = &Ops{dt: dt, run: &devRunner{cache: cache, arch: b.arch, dt: dt, mods: map[string]*jit.Kernel{}, fns: map[*kernel]cuda.Function{}}}
		}
		err := b.Compile(context.Background(), trainingUses())
		if fail == "" {
			if err != nil {
				t.Fatal(err)
			}
			if st, want := cache.Stats(), int64(2*len(files)+5); st.Compiles != want {
				t.Errorf("Compile compiled %d modules, want %d (%d op kernel files, twice, and 5 of attention)", st.Compiles, want, len(files))
			}
			continue
		}
		var ce *jit.CompileError
		if err == nil || !errors.As(err, &ce) || ce.Family != fail {
			t.Fatalf("Compile with %s failing: %v, want its *jit.CompileError", fail, err)
		}
		for _, dt := range []dtype.DType{dtype.BF16, dtype.F32} {
			if w := "tensorcuda: prepare the op kernels: tensorcuda: " + fail + ".cu (" + dt.String() + ")"; !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q:\n%v", w, err)
			}
		}
		if strings.Contains(err.Error(), "op_embed") || strings.Contains(err.Error(), "attention with") {
			t.Errorf("error names a kernel that compiled:\n%v", err)
		}
	}
}
