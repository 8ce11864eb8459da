package jit

import (
	"context"
	"testing"
)

// BenchmarkHit measures what a launch site pays to find its kernel when it
// is already loaded: Get (memory tier) + Function (per-device tier).
func BenchmarkHit(b *testing.B) {
	c, _ := New(Config{Compiler: newFake(0)})
	s := Source{Family: "attn_ref", Code: attnFwdF32, Arch: "sm_90", Options: []string{"-DA=1", "-DB=2"}}
	l := &fakeLoader{id: "cuda:0#1"}
	ctx := context.Background()
	img, _ := c.Get(ctx, s)
	img.Function(l, "attn_fwd_f32_d64")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		im, err := c.Get(ctx, s)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := im.Function(l, "attn_fwd_f32_d64"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKernelHandleHit is BenchmarkHit through a Kernel handle.
func BenchmarkKernelHandleHit(b *testing.B) {
	c, _ := New(Config{Compiler: newFake(0)})
	k := c.Kernel(Source{Family: "attn_ref", Code: attnFwdF32, Arch: "sm_90"})
	l := &fakeLoader{id: "cuda:0#1"}
	ctx := context.Background()
	if _, err := k.Function(ctx, l, "attn_fwd_f32_d64"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := k.Function(ctx, l, "attn_fwd_f32_d64"); err != nil {
			b.Fatal(err)
		}
	}
}
