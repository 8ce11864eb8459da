package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"dflash/flex"
	"dflash/internal/cputime"
	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// TestAttendRows compares AttendRows with a brute-force float64 softmax
// attention on random shapes: GQA groups 1, 2 and 4, rows that see no key,
// one key or every key, and more rows than one chunk of scores.
func TestAttendRows(t *testing.T) {
	rng := testseed.New(t)
	cpu := tensor.NewCPU[float32](2)
	for _, c := range []struct{ hq, hkv, n, D, keys, first int }{
		{4, 2, 1, 32, 70, 70}, {4, 2, 8, 32, 90, 83}, {2, 2, 3, 16, 5, 0}, {8, 2, 16, 64, 300, 285}, {4, 1, 4, 8, 1, 1},
		{2, 1, 2000, 8, 2000, 1}, // causal over 2000 rows: 4000 query rows × 2000 keys, attended in chunks
	} {
		q := randVec(rng, c.hq*c.n*c.D)
		k, v := make([][]float32, c.hkv), make([][]float32, c.hkv)
		for g := range k {
			k[g], v[g] = randVec(rng, c.keys*c.D), randVec(rng, c.keys*c.D)
		}
		keys := func(i int) int { return min(c.keys, c.first+i) }
		scale := 1 / math.Sqrt(float64(c.D))
		got := make([]float32, len(q))
		AttendRows(cpu, q, k, v, c.hq, c.n, c.D, keys, scale, got)
		want := make([]float64, len(q))
		for h := range c.hq {
			g := h / (c.hq / c.hkv)
			for i := range c.n {
				m := keys(i)
				s := make([]float64, m)
				for j := range s {
					for d := range c.D {
						s[j] += float64(q[(h*c.n+i)*c.D+d]) * float64(k[g][j*c.D+d])
					}
					s[j] *= scale
				}
				backendtest.Softmax(s)
				for j := range s {
					for d := range c.D {
						want[(h*c.n+i)*c.D+d] += s[j] * float64(v[g][j*c.D+d])
					}
				}
			}
		}
		backendtest.Close(t, "AttendRows", got, want, 1e-5)
	}
}

func randVec(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// causalOffset lets query q (at absolute position past+q) see keys kv ≤
// past+q: the mask decode gave flex before AttendRows.
var causalOffset = flex.NewMask("causal_offset", flex.Q().Add(flex.IntScalar("past")).Ge(flex.KV()))

// BenchmarkDecodeAttention times one decode step's attention (demo shape:
// 4 query and 2 KV heads of 32, 150 cached positions, 1 and 8 new rows)
// through flex (block mask built per call, as decode did) and AttendRows.
func BenchmarkDecodeAttention(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	cpu := tensor.NewCPU[float32](0)
	const hq, hkv, D, past = 4, 2, 32, 150
	for _, n := range []int{1, 8} {
		total := past + n
		q := randVec(rng, hq*n*D)
		kf, vf := randVec(rng, hkv*total*D), randVec(rng, hkv*total*D)
		b.Run("flex/"+string(rune('0'+n)), func(b *testing.B) {
			d := flex.Dims{Batch: 1, HeadsQ: hq, HeadsKV: hkv, LenQ: n, LenKV: total, HeadDim: D}
			args := flex.NewArgs().SetInt("past", past)
			c0 := cputime.Seconds()
			for b.Loop() {
				bm, err := flex.NewBlockMask(causalOffset, args, d, 0, 0)
				if err != nil {
					b.Fatal(err)
				}
				flex.Forward(d, q, kf, vf, bm, nil, args, 0.17)
			}
			b.ReportMetric((cputime.Seconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
		})
		b.Run("rows/"+string(rune('0'+n)), func(b *testing.B) {
			k := [][]float32{kf[:total*D], kf[total*D:]}
			v := [][]float32{vf[:total*D], vf[total*D:]}
			out := make([]float32, len(q))
			c0 := cputime.Seconds()
			for b.Loop() {
				AttendRows(cpu, q, k, v, hq, n, D, func(i int) int { return past + i + 1 }, 0.17, out)
			}
			b.ReportMetric((cputime.Seconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
}
