package flexcuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"dflash/dtype"
	"dflash/flex"
)

// sourceSpecs are the specialisations the source checks cover: both kernels
// of each direction, every head dimension, q blocks 64 and 128, GQA, fp16,
// the deterministic backward, with and without a score program with tensors.
func sourceSpecs() []struct {
	name  string
	score *flex.ScoreProgram
	cfg   Config
} {
	type c = struct {
		name  string
		score *flex.ScoreProgram
		cfg   Config
	}
	var out []c
	for _, d := range []int{64, 128, 256} {
		out = append(out,
			c{"hopper/alibi", flex.ALiBi(), Config{HeadDim: d, Fwd: Hopper, Bwd: Hopper}},
			c{"hopper/g2/bq64/fp16", nil, Config{HeadDim: d, Group: 2, BlockQ: 64, DType: dtype.F16, Fwd: Hopper, Bwd: Hopper}},
			c{"portable/relbias/g2", flex.RelativeBias(8), Config{HeadDim: d, Group: 2, Fwd: Portable, Bwd: Portable}},
			c{"portable/bq64", nil, Config{HeadDim: d, BlockQ: 64, Fwd: Portable, Bwd: Portable}},
			c{"det/softcap/g4", flex.SoftcapScalar(), Config{HeadDim: d, Group: 4, Deterministic: true, Fwd: Portable}},
		)
	}
	return out
}

// gxx preprocesses src with g++ (-Werror=undef: a template testing an
// undefined constant fails) and returns the output, or skips without g++.
func gxx(t *testing.T, src string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++ to preprocess the generated sources")
	}
	f := filepath.Join(t.TempDir(), "k.cu")
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// stdout only: g++'s warnings (#pragma once in the inlined headers) would
	// land anywhere in the text.
	var stderr strings.Builder
	cmd := exec.Command("g++", "-E", "-P", "-x", "c++", "-Werror=undef", f)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", &gxxError{stderr.String()}
	}
	return string(out), nil
}

type gxxError struct{ log string }

func (e *gxxError) Error() string { return e.log }

var staticAssert = regexp.MustCompile(`(?s)static_assert\(.*?"\);`)

// TestGeneratedSourcesPreprocess runs the generated forward and backward
// sources through g++'s preprocessor: every #if sees defined constants, no
// #error fires, the templates' static_asserts hold (compiled on their own,
// they only read constants), and leaving out any one #define of
// Spec.defines makes preprocessing fail: no template falls back to a
// constant of its own.
func TestGeneratedSourcesPreprocess(t *testing.T) {
	define := regexp.MustCompile(`(?m)^#define (FLEX_[A-Z0-9_]+) -?[0-9]+\n`)
	for _, c := range sourceSpecs() {
		a, err := New(nil, flex.Causal(), c.score, c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		fsrc, bsrc := a.Sources()
		for dir, src := range map[string]string{"fwd": fsrc, "bwd": bsrc} {
			t.Run(a.Spec().Key()+"/"+dir, func(t *testing.T) {
				out, err := gxx(t, src)
				if err != nil {
					t.Fatalf("preprocessing: %v", err)
				}
				asserts := strings.Join(staticAssert.FindAllString(out, -1), "\n")
				if asserts == "" {
					t.Fatal("no static_assert found in the preprocessed source")
				}
				cmd := exec.Command("g++", "-fsyntax-only", "-std=c++17", "-x", "c++", "-")
				cmd.Stdin = strings.NewReader(asserts + "\n")
				if msg, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("static_asserts fail: %s", msg)
				}
				if testing.Short() || c.cfg.HeadDim != 128 {
					return // a g++ run per define: one head dimension, not in -short
				}
				header := src[:strings.Index(src, "#define FLEX_NARGS")]
				for _, m := range define.FindAllStringSubmatch(header, -1) {
					if _, err := gxx(t, strings.Replace(src, m[0], "", 1)); err == nil {
						t.Errorf("the source without %s still preprocesses: a template defines or ignores it", m[1])
					}
				}
			})
		}
	}
}

// TestHalfBackwardGatesTensorGrads guards the head-dim-256 defect of the
// Hopper backward: its two CTAs per kv block both compute every dS, and
// without a gate both added the score tensors' gradients (2x the true
// value). The generated source must route the printed backward's atomicAdd
// calls through the half gate, and only where FLEX_BWD_HALF is 1 may the
// gate depend on the block index.
func TestHalfBackwardGatesTensorGrads(t *testing.T) {
	gate := "#define atomicAdd(p, v) (flex_bwd_half() == 0 ? atomicAdd(p, v) : 0.f)"
	for _, c := range []struct {
		cfg  Config
		half bool
	}{
		{Config{HeadDim: 256, Fwd: Hopper, Bwd: Hopper}, true},
		{Config{HeadDim: 256, Group: 2, Fwd: Hopper, Bwd: Hopper}, true},
		{Config{HeadDim: 128, Fwd: Hopper, Bwd: Hopper}, false},
		{Config{HeadDim: 256, Fwd: Portable, Bwd: Portable}, false},
	} {
		for _, score := range []*flex.ScoreProgram{flex.ALiBi(), flex.RelativeBias(8)} {
			a, err := New(nil, flex.Causal(), score, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			name := a.Spec().Key()
			_, src := a.Sources()
			if got := strings.Contains(src, "#define FLEX_BWD_HALF 1\n"); got != c.half {
				t.Errorf("%s: FLEX_BWD_HALF 1: %v, want %v", name, got, c.half)
			}
			if !strings.Contains(src, "return FLEX_BWD_HALF ? blockIdx.x & 1 : 0;") {
				t.Errorf("%s: flex_bwd_half does not read the half from blockIdx.x", name)
			}
			g, atomic, undef := strings.Index(src, gate), strings.Index(src, "atomicAdd(&"), strings.Index(src, "#undef atomicAdd")
			if g < 0 || atomic < g || undef < atomic {
				t.Errorf("%s: the score tensors' atomicAdd (at %d) is not inside the half gate (%d .. %d)", name, atomic, g, undef)
			}
			out, err := gxx(t, src)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if n, gated := strings.Count(out, "atomicAdd(&"), strings.Count(out, "(flex_bwd_half() == 0 ? atomicAdd(&"); n == 0 || n != gated {
				t.Errorf("%s: %d of %d score-tensor atomics gated after preprocessing", name, gated, n)
			}
		}
	}
}

// TestWriteSources writes the generated forward and backward sources of
// the causal mask, both kernels and every head dimension into the folder
// $DFLASH_FLEX_WRITE_SOURCES as KERNEL_DIR_dD.cu (hopper_bwd_d128.cu), for
// nvcc's resource report (scripts/gpu-attn.sh); it skips when unset.
func TestWriteSources(t *testing.T) {
	dir := os.Getenv("DFLASH_FLEX_WRITE_SOURCES")
	if dir == "" {
		t.Skip("DFLASH_FLEX_WRITE_SOURCES not set")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, k := range []Kernel{Hopper, Portable} {
		for _, d := range []int{64, 128, 256} {
			a, err := New(nil, flex.Causal(), nil, Config{HeadDim: d, Fwd: k, Bwd: k})
			if err != nil {
				t.Fatal(err)
			}
			fsrc, bsrc := a.Sources()
			for which, src := range map[string]string{"fwd": fsrc, "bwd": bsrc} {
				f := filepath.Join(dir, fmt.Sprintf("%s_%s_d%d.cu", k, which, d))
				if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestGeneratedSourcesTypeCheck type-checks the generated forward and
// backward sources of every spec of sourceSpecs with g++ -fsyntax-only over
// host stand-ins for the CUDA builtins (testdata/flex_host_stub.h): a
// template edited here must at least be well-formed C++. The inline PTX is
// not checked (NVRTC does that on the device, TestGeneratedSourcesCompile).
func TestGeneratedSourcesTypeCheck(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++ to type-check the generated sources")
	}
	stub, err := filepath.Abs(filepath.Join("testdata", "flex_host_stub.h"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range sourceSpecs() {
		a, err := New(nil, flex.DFlashMask(16), c.score, c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		fsrc, bsrc := a.Sources()
		t.Run(a.Spec().Key(), func(t *testing.T) {
			for _, src := range []string{fsrc, bsrc} {
				cmd := exec.Command("g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wno-unknown-pragmas", "-Wno-unused-function",
					"-Wno-unused-variable", "-Wno-pragma-once-outside-header", "-x", "c++", "-include", stub, "-")
				cmd.Stdin = strings.NewReader(src)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("g++: %v\n%s", err, out)
				}
			}
		})
	}
}
