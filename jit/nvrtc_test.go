package jit

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"strings"
	"testing"
)

// attnFwdF32 is the test kernel of the cache's tests: a float32 attention
// forward templated on the head dimension (D=64 and D=128 instantiated),
// big enough for a representative compile time. It builds alone with nvcc
// (scripts/gpu-check.sh).
//
//go:embed testdata/attn_fwd_f32.cu
var attnFwdF32 string

// These tests need NVRTC only (no GPU): they run wherever libnvrtc loads.
func newNVRTC(t *testing.T) *NVRTC {
	t.Helper()
	n, err := NewNVRTC()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	return n
}

func TestNVRTCThroughTheCache(t *testing.T) {
	n := newNVRTC(t)
	dir := t.TempDir()
	c, _ := newCache(t, n, dir)
	s := Source{Family: "attn_ref", Code: attnFwdF32, Arch: "sm_80"}
	img, err := c.Get(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(img.Data, []byte("\x7fELF")) {
		t.Fatalf("image for sm_80 is not CUBIN (%d bytes, %q...)", len(img.Data), img.Data[:min(8, len(img.Data))])
	}
	t.Logf("%s: %d-byte CUBIN in %v", n.Version(), len(img.Data), img.CompileTime)
	ptx, err := c.Get(context.Background(), Source{Family: "attn_ref", Code: s.Code, Arch: "compute_80"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(ptx.Data, []byte(".entry attn_fwd_f32_d128")) {
		t.Error("PTX lacks the d128 entry")
	}
	c2, _ := newCache(t, n, dir)
	again, err := c2.Get(context.Background(), s)
	if err != nil || !bytes.Equal(again.Data, img.Data) || c2.Stats().Compiles != 0 {
		t.Errorf("second cache: %v, stats %+v", err, c2.Stats())
	}
}

func TestNVRTCCompileErrorExcerpt(t *testing.T) {
	n := newNVRTC(t)
	c, _ := newCache(t, n, "")
	code := "extern \"C\" __global__ void k(float* x, int n) {\n  int i = threadIdx.x;\n  if (i < n) x[i] = seq_len * 2;\n}\n"
	_, err := c.Get(context.Background(), Source{Family: "bad", Code: code, Arch: "sm_80"})
	var ce *CompileError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCompile) {
		t.Fatalf("err = %v", err)
	}
	if ce.Line != 3 || !strings.Contains(ce.Excerpt, "> 3 |   if (i < n) x[i] = seq_len * 2;") ||
		!strings.Contains(ce.Log, "seq_len") || !strings.Contains(err.Error(), "NVRTC_ERROR_COMPILATION") {
		t.Errorf("line %d, excerpt:\n%s\nlog:\n%s", ce.Line, ce.Excerpt, ce.Log)
	}
}
