package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"dflash/dtype"
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

// Cache is a KV cache for one sequence on a backend, allocated once for
// at most Max() positions: per layer, the rotated keys and the values of
// the Len positions processed so far (tensor.KVCache). Free gives its
// memory back.
type Cache struct {
	kv  *tensor.KVCache[float32]
	Len int
}

// NewCache returns an empty cache for m on b holding up to maxLen
// positions (a prompt and the tokens generated after it), or a few more
// (tensor.NewKVCache rounds up).
func (m *Model) NewCache(b tensor.Backend[float32], maxLen int) *Cache {
	c := &m.Config
	return &Cache{kv: tensor.NewKVCache(b, c.NumLayers, c.NumKVHeads, maxLen, c.HeadDim)}
}

// Max returns the positions the cache holds at most.
func (c *Cache) Max() int { return c.kv.Max }

// Bytes returns the bytes of the keys and values of n positions in every
// layer (tensor.KVCache.Bytes): what a step attending to n positions reads
// of the cache.
func (c *Cache) Bytes(n int) int64 { return c.kv.Bytes(n) }

// DType returns the element type of the cache's keys and values (bf16 on
// CUDA).
func (c *Cache) DType() dtype.DType { return c.kv.DType() }

// Free gives the cache's memory back to its backend; c must not be used
// afterwards.
func (c *Cache) Free() { c.kv.Free() }

// Truncate drops every position from n on (n ≤ Len), as if only the first
// n tokens had been processed: speculative decoding rolls rejected draft
// tokens back with it (the rows stay; the next tokens overwrite them). It
// panics when n is out of range.
func (c *Cache) Truncate(n int) {
	if n < 0 || n > c.Len {
		panic(fmt.Sprintf("model.Cache.Truncate(%d) with %d positions cached", n, c.Len))
	}
	c.Len = n
}

// Step runs tokens (at positions cache.Len, cache.Len+1, ...) through the
// model with the cache, appends their keys and values to it and returns the
// logits of the last token [Vocab] in host memory. Nothing is recorded for
// gradients. The step's storage is b's step memory: scope it (tensor.Scope).
func (m *Model) Step(b tensor.Backend[float32], cache *Cache, tokens []int32) []float32 {
	logits, _ := m.Prefill(b, cache, tokens, nil)
	return tensor.Values(b, logits)
}

// Prefill is Step that leaves the last token's logits [1, Vocab] on b, to be
// read before the step's storage goes (tensor.Values for the logits,
// tensor.RowArgmax for the greedy token alone), and also returns, for each
// HF hidden-state index in states (see Input.States; NumLayers is the
// final-normed state), that state of every token [n, Hidden]: speculative
// decoding starts the drafter's context with them.
func (m *Model) Prefill(b tensor.Backend[float32], cache *Cache, tokens []int32, states []int) (logits *tensor.Tensor, hidden map[int]*tensor.Tensor) {
	x, hidden := m.decode(b, []*Cache{cache}, tokens, states)
	tp := tensor.NewInference(b)
	last := tp.Slice(x, 0, len(tokens)-1, len(tokens))
	return m.Logits(tp, tp.RMSNorm(last, m.Norm, m.Config.RMSNormEps)), hidden
}

// Decode is Prefill for a block of tokens that all need their logits, as
// speculative decoding's verification does: it returns the logits of every
// token [n, Vocab] and the hidden states in states of every token. The
// cache grows by n; Cache.Truncate takes rejected tokens back out. It is
// DecodeRows of one row.
func (m *Model) Decode(b tensor.Backend[float32], cache *Cache, tokens []int32, states []int) (logits *tensor.Tensor, hidden map[int]*tensor.Tensor) {
	return m.DecodeRows(b, []*Cache{cache}, tokens, states)
}

// DecodeRows is Decode of R = len(caches) sequences at once, n tokens each:
// tokens holds row r's n tokens at r·n..r·n+n−1, which go at positions
// caches[r].Len.. of row r (the caches may differ in length). The
// embedding, the projections, the MLPs, the norms and the LM head run once
// over all R·n tokens (the weights are read once for the batch); each
// row's keys and values go into its own cache and its queries attend to
// it alone. It returns the logits [R·n, Vocab] and the hidden states in
// states [R·n, Hidden], rows in the order of tokens; every cache grows by n.
func (m *Model) DecodeRows(b tensor.Backend[float32], caches []*Cache, tokens []int32, states []int) (logits *tensor.Tensor, hidden map[int]*tensor.Tensor) {
	x, hidden := m.decode(b, caches, tokens, states)
	tp := tensor.NewInference(b)
	return m.Logits(tp, tp.RMSNorm(x, m.Norm, m.Config.RMSNormEps)), hidden
}

// decode runs the decoder layers over the tokens of len(caches) rows with
// their caches (DecodeRows) and returns the last layer's output [R·n,
// Hidden] before the final norm and the hidden states with an index in
// states.
func (m *Model) decode(b tensor.Backend[float32], caches []*Cache, tokens []int32, states []int) (*tensor.Tensor, map[int]*tensor.Tensor) {
	hidden := map[int]*tensor.Tensor{}
	c := &m.Config
	R := len(caches)
	if R == 0 || len(tokens) == 0 || len(tokens)%R != 0 {
		panic(fmt.Sprintf("model: decode of %d tokens in %d rows", len(tokens), R))
	}
	n := len(tokens) / R
	for _, s := range states {
		if s < 0 || s > c.NumLayers {
			panic(fmt.Sprintf("model.Decode: hidden state %d out of range [0, %d]", s, c.NumLayers))
		}
	}
	pos := make([]int32, 0, R*n)
	kvs := make([]*tensor.KVCache[float32], R)
	past := make([]int, R)
	for r, cache := range caches {
		if cache.Len+n > cache.Max() {
			panic(fmt.Sprintf("model.Decode: %d tokens after %d positions overflow a cache of %d (row %d)", n, cache.Len, cache.Max(), r))
		}
		kvs[r], past[r] = cache.kv, cache.Len
		for i := range n {
			pos = append(pos, int32(cache.Len+i))
		}
	}
	// The pass's inputs go to b before the layers, which read every
	// position from there: a decoding-sized pass then replays as one
	// recorded region at any position (Backend.Replay).
	table := tensor.Table(b, m.rope, pos)
	ids := b.UploadInts(tokens)
	ats := tensor.CacheAts(b, past, n)
	tp := tensor.NewInference(b)
	scale := 1 / math.Sqrt(float64(c.HeadDim))
	var x *tensor.Tensor
	layers := func() {
		x = tp.Embedding(m.Embed, ids)
		for i := range m.Layers {
			if slices.Contains(states, i) {
				hidden[i] = x
			}
			q, k, v := m.qkv(tp, i, x, R, n, table) // q, k [R, H, n, D], v [R, n, H, D]
			tp.CachePutRows(kvs, i, k, false, v, true, ats)
			a := tp.CacheAttendRows(kvs, i, q, ats, true, scale) // a row's token i sees its cache and its tokens 0..i
			x = m.finishLayer(tp, i, x, tp.Transpose12(a), nil)
		}
		if slices.Contains(states, c.NumLayers) {
			hidden[c.NumLayers] = tp.RMSNorm(x, m.Norm, c.RMSNormEps)
		}
	}
	if n <= ReplayTokens {
		b.Replay(decodeKey{m: m, rows: R, n: n, span: ats[0].Span, states: fmt.Sprint(states)}, layers)
	} else {
		layers()
	}
	for r, cache := range caches {
		cache.Len = ats[r].Len
	}
	return x, hidden
}

// ReplayTokens is the most tokens per row of a decoding pass (Decode,
// DecodeRows, Prefill) that runs as a replayed region (Backend.Replay: a
// CUDA graph per shape and cache span on tensorcuda): a decoding step, a
// verification block; a longer prefill runs as it is, once.
const ReplayTokens = 32

// decodeKey is the region of a decoding pass: its model, rows, tokens per
// row, cache span and hidden states read (their fmt.Sprint).
type decodeKey struct {
	m             *Model
	rows, n, span int
	states        string
}

// ContextLimit is the longest sequence (prompt and generated tokens) that
// Generate and speculative decoding produce: Config.ContextLimit.
func (m *Model) ContextLimit() int { return m.Config.ContextLimit() }

// ContextLimit is max_position_embeddings, or unlimited (math.MaxInt) when
// the config leaves it 0.
func (c *Config) ContextLimit() int {
	if c.MaxPositionEmbeddings <= 0 {
		return math.MaxInt
	}
	return c.MaxPositionEmbeddings
}

// ErrPromptTooLong is returned for a prompt longer than the context limit.
var ErrPromptTooLong = errors.New("prompt longer than the context limit")

// CheckPrompt returns an error when prompt is empty, holds a token outside
// the vocabulary, or is longer than ContextLimit (wrapping ErrPromptTooLong).
func (m *Model) CheckPrompt(prompt []int32) error {
	if len(prompt) == 0 {
		return fmt.Errorf("empty prompt")
	}
	for i, id := range prompt {
		if id < 0 || int(id) >= m.Config.VocabSize {
			return fmt.Errorf("prompt token %d at %d out of range [0, %d)", id, i, m.Config.VocabSize)
		}
	}
	if len(prompt) > m.ContextLimit() {
		return fmt.Errorf("%w: %d tokens, max_position_embeddings %d", ErrPromptTooLong, len(prompt), m.ContextLimit())
	}
	return nil
}

// Generate continues prompt with up to opts.MaxNewTokens tokens using a KV
// cache and returns the new tokens (ending with a stop token if one was
// produced). The sequence never grows past ContextLimit tokens: a prompt
// of exactly that length gets no new token. It is safe to call from several
// goroutines at once. It is GenerateBatch of one prompt.
func (m *Model) Generate(b tensor.Backend[float32], prompt []int32, opts GenerateOptions) ([]int32, error) {
	out, err := m.GenerateBatch(b, [][]int32{prompt}, opts)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// GenerateBatch is Generate of every prompt at once: each prompt is
// prefilled on its own, then each step decodes the next token of every row
// still running in one DecodeRows pass, and a row leaves the batch when it
// is done. Row r samples with its own generator, seeded with opts.Seed+r
// (what Generate of that prompt alone with Seed opts.Seed+r uses), so its
// tokens do not depend on the batch it is in. It returns the new tokens of
// each prompt, in order.
func (m *Model) GenerateBatch(b tensor.Backend[float32], prompts [][]int32, opts GenerateOptions) ([][]int32, error) {
	for i, p := range prompts {
		if err := m.CheckPrompt(p); err != nil {
			if len(prompts) > 1 {
				err = fmt.Errorf("prompt %d: %w", i, err)
			}
			return nil, fmt.Errorf("model.Generate: %w", err)
		}
	}
	type row struct {
		i, maxNew int
		cache     *Cache
		rng       *rand.Rand
	}
	var run []*row
	for i, p := range prompts {
		if maxNew := min(opts.MaxNewTokens, m.ContextLimit()-len(p)); maxNew > 0 {
			run = append(run, &row{i: i, maxNew: maxNew, cache: m.NewCache(b, len(p)+maxNew), rng: rand.New(rand.NewPCG(opts.Seed+uint64(i), 0x6e6))})
		}
	}
	all := slices.Clone(run)
	defer func() {
		for _, r := range slices.Backward(all) { // last allocated first (tensor.KVCache.Free)
			r.cache.Free()
		}
	}()
	greedy := opts.Temperature <= 0
	out := make([][]int32, len(prompts))
	done := func(r *row) bool {
		o := out[r.i]
		return len(o) == r.maxNew || slices.Contains(opts.Stop, o[len(o)-1])
	}
	for _, r := range run {
		tensor.Scope(b, func() {
			logits, _ := m.Prefill(b, r.cache, prompts[r.i], nil)
			out[r.i] = []int32{ReadRows(b, logits, greedy).Pick(0, opts.Temperature, opts.TopK, r.rng)}
		})
	}
	for {
		run = slices.DeleteFunc(run, done)
		if len(run) == 0 {
			return out, nil
		}
		caches, tokens := make([]*Cache, len(run)), make([]int32, len(run))
		for k, r := range run {
			caches[k], tokens[k] = r.cache, out[r.i][len(out[r.i])-1]
		}
		tensor.Scope(b, func() {
			logits, _ := m.DecodeRows(b, caches, tokens, nil)
			rows := ReadRows(b, logits, greedy)
			for k, r := range run {
				out[r.i] = append(out[r.i], rows.Pick(k, opts.Temperature, opts.TopK, r.rng))
			}
		})
	}
}

// Sample picks a token from logits: the argmax (lowest id on ties) when
// temperature ≤ 0, else a draw from Probs(logits, temperature, topK).
func Sample(logits []float32, temperature float64, topK int, rng *rand.Rand) int32 {
	if temperature <= 0 {
		return Argmax(logits)
	}
	return SampleProbs(Probs(logits, temperature, topK), rng)
}

// Argmax returns the index of the largest logit, the lowest on ties (a NaN
// counts as the largest: tensor.Argmax, the rule of every backend's
// ArgmaxRows).
func Argmax(logits []float32) int32 { return int32(tensor.Argmax(logits)) }

// Probs returns the sampling distribution of logits (temperature > 0):
// p_i ∝ exp(logits_i/temperature) over the topK largest logits (all when
// topK ≤ 0; ties at the cut keep the lower ids), 0 elsewhere.
func Probs(logits []float32, temperature float64, topK int) []float64 {
	if !(temperature > 0) {
		panic(fmt.Sprintf("model.Probs: temperature %v", temperature))
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
	p := make([]float64, len(logits))
	var z float64
	for _, i := range idx {
		p[i] = math.Exp((float64(logits[i]) - mx) / temperature)
		z += p[i]
	}
	for _, i := range idx {
		p[i] /= z
	}
	return p
}

// SampleProbs draws an index from the distribution p (non-negative, summing
// to about 1) with one uniform draw of rng.
func SampleProbs(p []float64, rng *rand.Rand) int32 {
	u := rng.Float64()
	last := -1
	for i, v := range p {
		if v <= 0 {
			continue
		}
		last = i
		if u -= v; u < 0 {
			return int32(i)
		}
	}
	if last < 0 {
		panic("model.SampleProbs: no positive probability")
	}
	return int32(last) // u ran past the total by rounding
}
