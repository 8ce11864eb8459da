package tensor

import (
	"fmt"

	"dflash/dtype"
)

// KVCache holds the keys and values of one decoding sequence on a backend,
// allocated once for at most Max positions (what it was asked for rounded
// up to a multiple of KVQuantum): per layer, keys and values
// [KVHeads, Max, HeadDim] (Backend.AllocKeep). It holds no length: its
// owner (the target's model.Cache, the drafter's context) counts the
// positions written, and rolls back by counting fewer.
type KVCache[T Float] struct {
	K, V                  []Storage[T] // [layer]
	KVHeads, HeadDim, Max int
	b                     Backend[T]
}

// KVQuantum is the multiple of positions a KVCache holds: the caches of
// prompts of about one length have one size, so that a new one takes the
// memory the last one gave back (a device's caching allocator) and a
// replayed decoding pass (Backend.Replay) finds its addresses again.
const KVQuantum = 1024

// NewKVCache allocates the cache of layers layers on b for at least maxLen
// positions.
func NewKVCache[T Float](b Backend[T], layers, kvHeads, maxLen, headDim int) *KVCache[T] {
	if layers <= 0 || kvHeads <= 0 || maxLen <= 0 || headDim <= 0 {
		panic(fmt.Sprintf("tensor.NewKVCache: %d layers, %d kv heads, %d positions, head dim %d", layers, kvHeads, maxLen, headDim))
	}
	maxLen = (maxLen + KVQuantum - 1) / KVQuantum * KVQuantum
	c := &KVCache[T]{K: make([]Storage[T], layers), V: make([]Storage[T], layers), KVHeads: kvHeads, HeadDim: headDim, Max: maxLen, b: b}
	for l := range c.K {
		c.K[l], c.V[l] = b.AllocKeep(kvHeads*maxLen*headDim), b.AllocKeep(kvHeads*maxLen*headDim)
	}
	return c
}

// KVBytes returns the bytes of n positions of a KV cache of layers layers
// with kvHeads heads of headDim elements of elem bytes, keys and values:
//
//	2 · layers · kvHeads · headDim · n · elem
//
// what attention over those positions reads of it.
func KVBytes(layers, kvHeads, headDim, n, elem int) int64 {
	return 2 * int64(layers) * int64(kvHeads) * int64(headDim) * int64(n) * int64(elem)
}

// Bytes returns the bytes of the first n positions of every layer of c
// (KVBytes in the element type of its storage: bf16 on CUDA); Bytes(c.Max)
// is its whole allocation.
func (c *KVCache[T]) Bytes(n int) int64 {
	return KVBytes(len(c.K), c.KVHeads, c.HeadDim, n, c.DType().Size())
}

// DType returns the element type of c's keys and values.
func (c *KVCache[T]) DType() dtype.DType { return c.K[0].DType() }

// Free gives the cache's memory back, last allocated first (a caching
// device allocator that hands out a size's free blocks last freed first
// then holds them in the order it had before the cache was made: decoding
// between training steps leaves the addresses the next step's masks get
// as they were); c must not be used afterwards.
func (c *KVCache[T]) Free() {
	for l := len(c.K) - 1; l >= 0; l-- {
		c.b.FreeKeep(c.V[l])
		c.b.FreeKeep(c.K[l])
	}
	c.K, c.V = nil, nil
}

// CacheAt is where one row of a decoding pass stands in its KV cache: Past
// positions are cached before the pass, which writes its tokens' keys and
// values after them and attends over the first Len. At holds [Past, Len]
// on the backend, and the backend's kernels read the positions from there
// rather than from their arguments: a pass recorded at one position then
// replays at any other (Backend.Replay: tensorcuda's CUDA graphs). Span
// sizes a device's split of the cache for attention: the same power of two
// of at least Len for every row of a pass (CacheAts), so that the passes
// of one span launch the same work whatever their lengths.
type CacheAt struct {
	Past, Len, Span int
	At              Ints
}

// MinCacheSpan is the smallest CacheAt.Span: passes over caches of up to
// this many positions share one.
const MinCacheSpan = 64

// CacheSpan returns the span of a pass whose longest row attends over
// length positions: the power of two of at least length and MinCacheSpan.
func CacheSpan(length int) int {
	s := MinCacheSpan
	for s < length {
		s *= 2
	}
	return s
}

// CacheAts returns, for each row r of a pass of n tokens after past[r]
// cached positions, its CacheAt (Len = past[r]+n, the span of the longest
// row), uploading every row's [Past, Len] to b in one copy.
func CacheAts[T Float](b Backend[T], past []int, n int) []CacheAt {
	if len(past) == 0 || n < 0 {
		panic(fmt.Sprintf("tensor.CacheAts: %d rows of %d tokens", len(past), n))
	}
	host := make([]int32, 0, 2*len(past))
	longest := 0
	for r, p := range past {
		if p < 0 {
			panic(fmt.Sprintf("tensor.CacheAts: row %d after %d positions", r, p))
		}
		host = append(host, int32(p), int32(p+n))
		longest = max(longest, p+n)
	}
	at := b.UploadInts(host)
	ats := make([]CacheAt, len(past))
	for r, p := range past {
		ats[r] = CacheAt{Past: p, Len: p + n, Span: CacheSpan(longest), At: at.Slice(2*r, 2*r+2)}
	}
	return ats
}

// CachePut writes the keys k and values v of n new positions into layer
// l of c at positions at.Past..at.Len−1 (n = at.Len − at.Past). Each is
// [heads, n, HeadDim] (with leading dimensions of 1 allowed: attention's
// layout) or, when its headsInner flag is set, [n, heads, HeadDim] in any
// shape of that size. Nothing is recorded for gradients. It is
// CachePutRows of one row.
func (tp *TapeOf[T]) CachePut(c *KVCache[T], l int, k *Of[T], kHeadsInner bool, v *Of[T], vHeadsInner bool, at CacheAt) {
	tp.CachePutRows([]*KVCache[T]{c}, l, k, kHeadsInner, v, vHeadsInner, []CacheAt{at})
}

// CachePutRows is CachePut for R = len(cs) sequences at once: k and v hold
// R equal rows one after the other (each CachePut's layout: a batch-major
// [R, heads, n, HeadDim], or [R, n, heads, HeadDim] with headsInner, in any
// shape of that size), and row r goes into layer l of cs[r] at ats[r]. The
// caches share heads and HeadDim.
func (tp *TapeOf[T]) CachePutRows(cs []*KVCache[T], l int, k *Of[T], kHeadsInner bool, v *Of[T], vHeadsInner bool, ats []CacheAt) {
	R := len(cs)
	if R == 0 || len(ats) != R {
		panic(fmt.Sprintf("tensor.CachePutRows: %d caches, %d positions", R, len(ats)))
	}
	c := cs[0]
	row := R * c.KVHeads * c.HeadDim
	for _, x := range []*Of[T]{k, v} {
		if x.Numel()%row != 0 {
			panic(fmt.Sprintf("tensor.CachePutRows: %v is not %d rows of %d kv heads × %d", x, R, c.KVHeads, c.HeadDim))
		}
	}
	if v.Numel() != k.Numel() {
		panic(fmt.Sprintf("tensor.CachePutRows: keys %v and values %v differ in size", k, v))
	}
	n := k.Numel() / row
	size := n * c.KVHeads * c.HeadDim
	for r, cr := range cs {
		if cr.KVHeads != c.KVHeads || cr.HeadDim != c.HeadDim {
			panic(fmt.Sprintf("tensor.CachePutRows: cache %d has %d kv heads × %d, cache 0 %d × %d", r, cr.KVHeads, cr.HeadDim, c.KVHeads, c.HeadDim))
		}
		tp.b.CacheRows(k.Store.Slice(r*size, (r+1)*size), c.KVHeads, n, c.HeadDim, kHeadsInner, cr.K[l], cr.Max, ats[r])
		tp.b.CacheRows(v.Store.Slice(r*size, (r+1)*size), c.KVHeads, n, c.HeadDim, vHeadsInner, cr.V[l], cr.Max, ats[r])
	}
}

// CacheAttend returns the attention of q [1, heads, n, HeadDim] over the
// first at.Len positions of layer l of c (Backend.DecodeAttention: with
// causal, query row i is position at.Len−n+i and sees the positions up to
// it; without, every row sees all at.Len), [1, heads, n, HeadDim]. Nothing
// is recorded for gradients. It is CacheAttendRows of one row.
func (tp *TapeOf[T]) CacheAttend(c *KVCache[T], l int, q *Of[T], at CacheAt, causal bool, scale float64) *Of[T] {
	return tp.CacheAttendRows([]*KVCache[T]{c}, l, q, []CacheAt{at}, causal, scale)
}

// CacheAttendRows is CacheAttend for R = len(cs) sequences at once: row r
// of q [R, heads, n, HeadDim] attends over the first ats[r].Len positions
// of layer l of cs[r], into row r of the result [R, heads, n, HeadDim].
// Each row is one Backend.DecodeAttention on its slice of q and of the
// result (the rows' caches differ in length).
func (tp *TapeOf[T]) CacheAttendRows(cs []*KVCache[T], l int, q *Of[T], ats []CacheAt, causal bool, scale float64) *Of[T] {
	R := len(cs)
	if R == 0 || len(ats) != R {
		panic(fmt.Sprintf("tensor.CacheAttendRows: %d caches, %d positions", R, len(ats)))
	}
	D := cs[0].HeadDim
	if len(q.Shape) != 4 || q.Shape[0] != R || q.Shape[3] != D {
		panic(fmt.Sprintf("tensor.CacheAttendRows: queries %v are not [%d, heads, n, %d]", q, R, D))
	}
	out := tp.alloc("attn", q.Shape...)
	heads, n := q.Shape[1], q.Shape[2]
	size := heads * n * D
	for r, c := range cs {
		if c.HeadDim != D {
			panic(fmt.Sprintf("tensor.CacheAttendRows: cache %d has head dim %d, cache 0 %d", r, c.HeadDim, D))
		}
		tp.b.DecodeAttention(q.Store.Slice(r*size, (r+1)*size), heads, n, D, c.K[l], c.V[l], c.KVHeads, c.Max, ats[r], causal, scale, out.Store.Slice(r*size, (r+1)*size))
	}
	return out
}

// Values returns the values of t in host memory: a copy downloaded from
// its backend (the rows of logits a decoding samples from).
func Values[T Float](b Backend[T], t *Of[T]) []T {
	x := make([]T, t.Numel())
	b.Download(t.Store, x)
	return x
}
