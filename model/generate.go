package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"dflash/flex"
	"dflash/tensor"
)

// GenerateOptions control Generate.
type GenerateOptions struct {
	MaxNewTokens int
	// Temperature 0 decodes greedily (argmax, lowest id on ties); above 0 it
	// samples from softmax(logits/Temperature), restricted to the TopK most
	// likely tokens when TopK > 0.
	Temperature float64
	TopK        int
	Seed        uint64 // seeds sampling
	// Stop ends generation after any of these tokens (it is included in the result).
	Stop []int32
}

// causalOffset allows query q (at absolute position past+q) to see keys kv ≤ past+q.
var causalOffset = flex.NewMask("causal_offset", flex.Q().Add(flex.IntScalar("past")).Ge(flex.KV()))

// Cache is a KV cache for one sequence: per layer and kv head, the rotated
// keys and the values of every position processed so far.
type Cache struct {
	k, v [][][]float32 // [layer][kvHead] → len·HeadDim
	Len  int
}

// NewCache returns an empty cache for m.
func (m *Model) NewCache() *Cache {
	c := &Cache{k: make([][][]float32, m.Config.NumLayers), v: make([][][]float32, m.Config.NumLayers)}
	for i := range c.k {
		c.k[i] = make([][]float32, m.Config.NumKVHeads)
		c.v[i] = make([][]float32, m.Config.NumKVHeads)
	}
	return c
}

// Step runs tokens (at positions cache.Len, cache.Len+1, ...) through the
// model with the cache, appends their keys and values to it and returns the
// logits of the last token [Vocab]. Nothing is recorded for gradients.
func (m *Model) Step(b tensor.Backend[float32], cache *Cache, tokens []int32) []float32 {
	c := &m.Config
	n, past := len(tokens), cache.Len
	tp := tensor.NewInference(b)
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(past + i)
	}
	table := tensor.Table[float32](m.rope, pos)
	total := past + n
	d := flex.Dims{Batch: 1, HeadsQ: c.NumHeads, HeadsKV: c.NumKVHeads, LenQ: n, LenKV: total, HeadDim: c.HeadDim}
	args := flex.NewArgs().SetInt("past", past)
	bm, err := flex.NewBlockMask(causalOffset, args, d, 0, 0)
	if err != nil {
		panic("model.Step: block mask: " + err.Error())
	}
	scale := 1 / math.Sqrt(float64(c.HeadDim))
	D := c.HeadDim
	x := tp.Embedding(m.Embed, tokens)
	for i := range m.Layers {
		q, k, v := m.qkv(tp, i, x, 1, n, table) // [1, n, H, D]
		K := tensor.New[float32]("k", 1, c.NumKVHeads, total, D)
		V := tensor.New[float32]("v", 1, c.NumKVHeads, total, D)
		for h := range c.NumKVHeads {
			for t := range n {
				cache.k[i][h] = append(cache.k[i][h], k.Data[(t*c.NumKVHeads+h)*D:][:D]...)
				cache.v[i][h] = append(cache.v[i][h], v.Data[(t*c.NumKVHeads+h)*D:][:D]...)
			}
			copy(K.Data[h*total*D:], cache.k[i][h])
			copy(V.Data[h*total*D:], cache.v[i][h])
		}
		a := tp.Attention(tp.Transpose12(q), K, V, bm, nil, args, scale)
		x = m.finishLayer(tp, i, x, tp.Transpose12(a))
	}
	cache.Len = total
	last := tp.Slice(x, 0, n-1, n)
	return m.Logits(tp, tp.RMSNorm(last, m.Norm, c.RMSNormEps)).Data
}

// Generate continues prompt with up to opts.MaxNewTokens tokens using a KV
// cache and returns the new tokens (ending with a stop token if one was
// produced). It is safe to call from several goroutines at once.
func (m *Model) Generate(b tensor.Backend[float32], prompt []int32, opts GenerateOptions) ([]int32, error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("model.Generate: empty prompt")
	}
	for i, id := range prompt {
		if id < 0 || int(id) >= m.Config.VocabSize {
			return nil, fmt.Errorf("model.Generate: prompt token %d at %d out of range [0, %d)", id, i, m.Config.VocabSize)
		}
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x6e6))
	cache := m.NewCache()
	logits := m.Step(b, cache, prompt)
	var out []int32
	for len(out) < opts.MaxNewTokens {
		next := Sample(logits, opts.Temperature, opts.TopK, rng)
		out = append(out, next)
		stop := false
		for _, s := range opts.Stop {
			stop = stop || s == next
		}
		if stop || len(out) == opts.MaxNewTokens {
			break
		}
		logits = m.Step(b, cache, []int32{next})
	}
	return out, nil
}

// Sample picks a token from logits: the argmax (lowest id on ties) when
// temperature ≤ 0, else a draw from softmax(logits/temperature) over the topK
// largest logits (all when topK ≤ 0).
func Sample(logits []float32, temperature float64, topK int, rng *rand.Rand) int32 {
	if temperature <= 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return int32(best)
	}
	idx := make([]int, len(logits))
	for i := range idx {
		idx[i] = i
	}
	if topK > 0 && topK < len(idx) {
		sort.SliceStable(idx, func(a, b int) bool { return logits[idx[a]] > logits[idx[b]] })
		idx = idx[:topK]
	}
	mx := math.Inf(-1)
	for _, i := range idx {
		mx = math.Max(mx, float64(logits[i]))
	}
	p := make([]float64, len(idx))
	var z float64
	for j, i := range idx {
		p[j] = math.Exp((float64(logits[i]) - mx) / temperature)
		z += p[j]
	}
	u := rng.Float64() * z
	for j, i := range idx {
		u -= p[j]
		if u <= 0 {
			return int32(i)
		}
	}
	return int32(idx[len(idx)-1])
}
