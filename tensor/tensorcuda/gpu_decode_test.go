package tensorcuda

import (
	"fmt"
	"math"
	"testing"

	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestGPUDecodeAttention compares op_decode_attn (with its combine) with
// the float64 brute force on inputs rounded to bf16: past lengths 1, 127,
// 128 and 4097 (one tile, a partial and a whole tile, many splits), 1..16
// query rows, causal and not, GQA groups 1 and 4, head dims 64 and 128.
// The cache rows after the attended ones hold NaN, so a read past length
// shows. The tolerance covers the output's bf16 rounding and fp32 sums.
func TestGPUDecodeAttention(t *testing.T) {
	w, cache := gputest.Worker0Cache(t)
	rng := testseed.New(t)
	const kvHeads = 2
	err := w.Run(func(d *gpu.Device) error {
		b, err := NewBackend(cache, d)
		if err != nil {
			return err
		}
		defer b.Close()
		up := func(x []float32) (tensor.Storage[float32], []float32) { // bf16 storage and the values it holds
			s := b.Upload(x, false)
			r := make([]float32, len(x))
			b.Download(s, r)
			return s, r
		}
		for _, D := range []int{64, 128} {
			for _, group := range []int{1, 4} {
				for _, past := range []int{1, 127, 128, 4097} {
					for n := 1; n <= 16; n++ {
						for _, causal := range []bool{true, false} {
							heads, length := group*kvHeads, past+n
							maxLen := length + 3
							q := make([]float32, heads*n*D)
							for i := range q {
								q[i] = float32(rng.NormFloat64())
							}
							k, v := make([]float32, kvHeads*maxLen*D), make([]float32, kvHeads*maxLen*D)
							for i := range k {
								if (i/D)%maxLen >= length {
									k[i], v[i] = float32(math.NaN()), float32(math.NaN())
									continue
								}
								k[i], v[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
							}
							qs, qr := up(q)
							ks, kr := up(k)
							vs, vr := up(v)
							out := b.AllocOut(len(q))
							scale := 1 / math.Sqrt(float64(D))
							b.DecodeAttention(qs, heads, n, D, ks, vs, kvHeads, maxLen, length, causal, scale, out)
							got := make([]float32, len(q))
							b.Download(out, got)
							want := backendtest.DecodeAttention(qr, heads, n, D, kr, vr, kvHeads, maxLen, length, causal, scale)
							backendtest.Close(t, fmt.Sprintf("D %d group %d past %d n %d causal %v", D, group, past, n, causal), got, want, 1e-2)
							b.ResetStep()
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGPUCacheRows compares op_cache_rows with the CPU backend for both
// source layouts, on a cache whose other rows keep their values.
func TestGPUCacheRows(t *testing.T) {
	w, cache := gputest.Worker0Cache(t)
	rng := testseed.New(t)
	const heads, n, D, maxLen, past = 3, 5, 64, 20, 9
	cpu := tensor.NewCPU[float32](1)
	err := w.Run(func(d *gpu.Device) error {
		b, err := NewBackend(cache, d)
		if err != nil {
			return err
		}
		defer b.Close()
		for _, inner := range []bool{false, true} {
			src, dst := make([]float32, heads*n*D), make([]float32, heads*maxLen*D)
			for i := range src {
				src[i] = float32(rng.NormFloat64())
			}
			for i := range dst {
				dst[i] = float32(rng.NormFloat64())
			}
			ss, cs := b.Upload(src, false), b.AllocKeep(len(dst))
			b.WriteParams(cs, dst)
			b.Download(ss, src) // the bf16 values
			b.Download(cs, dst)
			b.CacheRows(ss, heads, n, D, inner, cs, maxLen, past)
			got := make([]float32, len(dst))
			b.Download(cs, got)
			cpu.CacheRows(tensor.Host[float32](src), heads, n, D, inner, tensor.Host[float32](dst), maxLen, past)
			want := make([]float64, len(dst))
			for i, x := range dst {
				want[i] = float64(x)
			}
			backendtest.Close(t, fmt.Sprintf("CacheRows headsInner %v", inner), got, want, 0)
			b.FreeKeep(cs)
			b.ResetStep()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
