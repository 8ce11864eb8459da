package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"dflash/internal/cputime"
	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestDecodeAttention compares the CPU backend's DecodeAttention with the
// float64 brute force on random caches: GQA groups 1, 2 and 4, causal rows
// and rows that see every key, one key, and more query rows than one chunk
// of scores.
func TestDecodeAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 11))
	cpu := tensor.NewCPU[float32](2)
	for _, c := range []struct {
		hq, hkv, n, D, length, maxLen int
		causal                        bool
	}{
		{4, 2, 1, 32, 70, 80, true}, {4, 2, 8, 32, 90, 90, true}, {2, 2, 3, 16, 5, 9, false}, {8, 2, 16, 64, 300, 301, true},
		{4, 1, 1, 8, 1, 1, true}, {4, 4, 4, 8, 4, 6, true},
		{2, 1, 2000, 8, 2000, 2000, true}, // causal over 2000 rows: 4000 query rows × 2000 keys, attended in chunks
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			q := randF32(rng, c.hq*c.n*c.D)
			k, v := randF32(rng, c.hkv*c.maxLen*c.D), randF32(rng, c.hkv*c.maxLen*c.D)
			scale := 1 / math.Sqrt(float64(c.D))
			got := make(tensor.Host[float32], len(q))
			cpu.DecodeAttention(q, c.hq, c.n, c.D, k, v, c.hkv, c.maxLen, tensor.CacheAts(cpu, []int{c.length - c.n}, c.n)[0], c.causal, scale, got)
			want := backendtest.DecodeAttention(q, c.hq, c.n, c.D, k, v, c.hkv, c.maxLen, c.length, c.causal, scale)
			backendtest.Close(t, "DecodeAttention", got, want, 1e-5)
		})
	}
}

// TestCacheRows checks CacheRows against element-wise placement for both
// source layouts, and that the rows around the written ones keep their
// values.
func TestCacheRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 12))
	cpu := tensor.NewCPU[float64](1)
	const heads, n, D, maxLen, past = 3, 4, 5, 11, 6
	for _, inner := range []bool{false, true} {
		src := make([]float64, heads*n*D)
		for i := range src {
			src[i] = rng.NormFloat64()
		}
		cache := make(tensor.Host[float64], heads*maxLen*D)
		for i := range cache {
			cache[i] = rng.NormFloat64()
		}
		want := append([]float64(nil), cache...)
		for h := range heads {
			for r := range n {
				for d := range D {
					at := (h*n+r)*D + d
					if inner {
						at = (r*heads+h)*D + d
					}
					want[(h*maxLen+past+r)*D+d] = src[at]
				}
			}
		}
		cpu.CacheRows(tensor.Host[float64](src), heads, n, D, inner, cache, maxLen, tensor.CacheAts(cpu, []int{past}, n)[0])
		backendtest.Close(t, fmt.Sprintf("CacheRows headsInner %v", inner), cache, want, 0)
	}
}

// TestCacheAts: every row's positions after its past, one span for the
// pass (the power of two of at least the longest row and MinCacheSpan),
// the positions on the backend equal to the host's; an op whose positions
// on the backend are not its own panics (the CPU reads them from there, as
// a device's kernels do).
func TestCacheAts(t *testing.T) {
	cpu := tensor.NewCPU[float64](1)
	for _, c := range []struct {
		past    []int
		n, span int
	}{{[]int{0}, 1, tensor.MinCacheSpan}, {[]int{3, 70}, 4, 128}, {[]int{127, 1}, 1, 128}, {[]int{128}, 1, 256}, {[]int{5000, 10}, 16, 8192}} {
		ats := tensor.CacheAts(cpu, c.past, c.n)
		for r, at := range ats {
			dev := []int32(at.At.(tensor.HostInts))
			if at.Past != c.past[r] || at.Len != c.past[r]+c.n || at.Span != c.span || len(dev) != 2 || int(dev[0]) != at.Past || int(dev[1]) != at.Len {
				t.Errorf("CacheAts(%v, %d) row %d: %+v (on the backend %v), want past %d, len %d, span %d", c.past, c.n, r, at, dev, c.past[r], c.past[r]+c.n, c.span)
			}
		}
	}
	at := tensor.CacheAts(cpu, []int{2}, 3)[0]
	at.At.(tensor.HostInts)[0] = 1 // the backend would write at position 1
	defer func() {
		if recover() == nil {
			t.Error("CacheRows with positions on the backend unlike the host's did not panic")
		}
	}()
	cpu.CacheRows(make(tensor.Host[float64], 3), 1, 3, 1, false, make(tensor.Host[float64], 8), 8, at)
}

// BenchmarkDecodeAttention times one decode step's attention on the CPU
// (demo shape: 4 query and 2 KV heads of 32, 150 cached positions, 1 and 8
// new rows).
func BenchmarkDecodeAttention(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	cpu := tensor.NewCPU[float32](0)
	const hq, hkv, D, past = 4, 2, 32, 150
	for _, n := range []int{1, 8} {
		total := past + n
		q := randF32(rng, hq*n*D)
		k, v := randF32(rng, hkv*total*D), randF32(rng, hkv*total*D)
		out := make(tensor.Host[float32], len(q))
		at := tensor.CacheAts(cpu, []int{past}, n)[0]
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			c0 := cputime.Seconds()
			for b.Loop() {
				cpu.DecodeAttention(q, hq, n, D, k, v, hkv, total, at, true, 0.17, out)
			}
			b.ReportMetric((cputime.Seconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestKVCacheBytes: Bytes of every position is the cache's allocation,
// element by element (each layer's keys and values, their lengths times
// their element size), and each position adds its share.
func TestKVCacheBytes(t *testing.T) {
	rng := testseed.New(t)
	layers, kvHeads, maxLen, headDim := 1+rng.IntN(5), 1+rng.IntN(4), 2+rng.IntN(40), 1+rng.IntN(16)
	n := rng.IntN(maxLen)
	checkKVBytes(t, tensor.NewKVCache(tensor.NewCPU[float32](1), layers, kvHeads, maxLen, headDim), n)
	checkKVBytes(t, tensor.NewKVCache(tensor.NewCPU[float64](1), layers, kvHeads, maxLen, headDim), n)
}

func checkKVBytes[T tensor.Float](t *testing.T, c *tensor.KVCache[T], n int) {
	t.Helper()
	var alloc int64
	for l := range c.K {
		for _, s := range []tensor.Storage[T]{c.K[l], c.V[l]} {
			alloc += int64(s.Len() * s.DType().Size())
		}
	}
	if got := c.Bytes(c.Max); got != alloc {
		t.Errorf("%s: Bytes(%d) = %d, the cache allocated %d bytes", c.K[0].DType(), c.Max, got, alloc)
	}
	if got, want := c.Bytes(n), alloc/int64(c.Max)*int64(n); got != want {
		t.Errorf("%s: Bytes(%d) = %d, want %d (of %d positions' %d)", c.K[0].DType(), n, got, want, c.Max, alloc)
	}
}
