package tensorcuda

import (
	"fmt"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/tensor"
)

// Decoding's block shapes (kernels/op_decode.cu): op_decode_attn runs
// decWarps warps over decRows query rows of one kv head's group and one
// split of the cache, for head dimensions up to decMaxD (its shared tiles
// are sized by it: 40.5 KiB of fp32 at 128, under the 48 KiB a block gets
// without opting in); op_decode_attn_mma, its tensor-core form for bf16,
// the same block of rows (one mma.sync tile), its warps taking tiles of
// decMMATile keys in turn.
const (
	decRows    = 16
	decWarps   = 4
	decMaxD    = 128
	decTile    = 32 // keys per tile: one per lane (the kernel's DEC_TILE)
	decMMATile = 16 // keys per warp tile of op_decode_attn_mma (DEC_MMA_TILE)
	// decMaxSplits is the most splits op_decode_combine merges (its
	// weights in shared memory); a longer span gets longer splits.
	decMaxSplits = 1024
	// decBlocksPerSM is the grid op_decode_attn aims at: this many blocks
	// per multiprocessor, so that one sequence's few heads fill the GPU.
	decBlocksPerSM = 2
)

// AllocKeep returns n zero bf16 elements of persistent memory (the
// activations' dtype: the keys and values a cache holds are bf16 already,
// so fp32 would keep no more of them and double the bytes that decoding's
// attention reads).
func (b *Backend) AllocKeep(n int) tensor.Storage[float32] {
	return b.newBuf(n, dtype.BF16, true, true)
}

// FreeKeep frees a whole allocation of AllocKeep.
func (b *Backend) FreeKeep(s tensor.Storage[float32]) {
	x := b.buf(s, "FreeKeep storage")
	if x.step != 0 || !x.whole {
		panic(fmt.Sprintf("tensorcuda: FreeKeep of %v, not a whole allocation of AllocKeep", x))
	}
	if x.n == 0 {
		return
	}
	for i, p := range b.persistent {
		if p.Ptr == x.ptr {
			b.mem.free(p)
			b.persistent = append(b.persistent[:i], b.persistent[i+1:]...)
			return
		}
	}
	panic(fmt.Sprintf("tensorcuda: FreeKeep of %v, which is not (or no longer) allocated", x))
}

// CacheRows writes n rows of every head into the cache (same dtypes) at
// the position op_cache_rows reads from at.At.
func (b *Backend) CacheRows(srcS tensor.Storage[float32], heads, n, headDim int, headsInner bool, cacheS tensor.Storage[float32], maxLen int, at tensor.CacheAt) {
	src, cache, pos := b.buf(srcS, "CacheRows src"), b.buf(cacheS, "CacheRows cache"), b.cacheAt(at, "CacheRows")
	defer b.span("CacheRows", 0, heads, n, headDim)()
	dt := same("CacheRows", src, cache)
	if at.Len-at.Past != n {
		panic(fmt.Sprintf("tensorcuda: CacheRows: %d rows into positions %d..%d", n, at.Past, at.Len))
	}
	must("CacheRows", b.ops(dt).CacheRows(src.Buffer(), heads, n, headDim, headsInner, cache.Buffer(), maxLen, at.Past, pos))
}

// cacheAt returns at's positions on the device, [Past, Len], checking them
// against its host copies' bounds.
func (b *Backend) cacheAt(at tensor.CacheAt, op string) gpu.Buffer {
	x := b.ints(at.At, op+" positions")
	if x.n != 2 || at.Past < 0 || at.Len < at.Past || at.Span < at.Len {
		panic(fmt.Sprintf("tensorcuda: %s: positions %+v", op, at))
	}
	return x.Buffer()
}

// DecodeAttention attends the query rows to the cache in splits of the
// cache (flash-decoding) with fp32 partials in step memory; the grid and
// the partials are sized by at.Span, the keys attended read from at.At.
func (b *Backend) DecodeAttention(qS tensor.Storage[float32], heads, n, headDim int, kS, vS tensor.Storage[float32], kvHeads, maxLen int, at tensor.CacheAt, causal bool, scale float64, outS tensor.Storage[float32]) {
	b.decodeAttention(qS, heads, n, headDim, kS, vS, kvHeads, maxLen, at, causal, scale, outS, true)
}

// decodeAttention is DecodeAttention, on op_decode_attn_mma where it takes
// the operands and tensorCores is set (false: the CUDA-core kernel, for
// its test).
func (b *Backend) decodeAttention(qS tensor.Storage[float32], heads, n, headDim int, kS, vS tensor.Storage[float32], kvHeads, maxLen int, at tensor.CacheAt, causal bool, scale float64, outS tensor.Storage[float32], tensorCores bool) {
	q, k, v, out := b.buf(qS, "DecodeAttention q"), b.buf(kS, "DecodeAttention k"), b.buf(vS, "DecodeAttention v"), b.buf(outS, "DecodeAttention out")
	pos := b.cacheAt(at, "DecodeAttention")
	defer b.span("DecodeAttention", 4*float64(heads)*float64(n)*float64(at.Len)*float64(headDim), heads, n, at.Len, headDim)()
	dt := same("DecodeAttention", q, k, v, out)
	o := b.ops(dt)
	g := o.decodeGrid(heads, n, kvHeads, at.Span, tensorCores && o.decodeMMA(q.Buffer(), k.Buffer(), v.Buffer()))
	po := b.newBuf(g.splits*heads*n*headDim, dtype.F32, false, false)
	pml := b.newBuf(g.splits*heads*n*2, dtype.F32, false, false)
	must("DecodeAttention", o.DecodeAttention(q.Buffer(), heads, n, headDim, k.Buffer(), v.Buffer(), kvHeads, maxLen, at.Len, pos, causal, scale, po.Buffer(), pml.Buffer(), g, out.Buffer()))
	b.freeTemp(pml)
	b.freeTemp(po)
}

// CacheRows launches op_cache_rows: cache[h, past+t, :] = src[h, t, :], or
// src[t, h, :] with headsInner, with past read from at[0] on the device
// (past is its host copy, for the bounds).
func (o *Ops) CacheRows(src gpu.Buffer, heads, n, headDim int, headsInner bool, cache gpu.Buffer, maxLen, past int, at gpu.Buffer) error {
	if heads <= 0 || n < 0 || headDim <= 0 || past < 0 || past+n > maxLen {
		panic(fmt.Sprintf("tensorcuda: CacheRows: %d heads × %d rows × %d at row %d of %d", heads, n, headDim, past, maxLen))
	}
	total := int64(heads) * int64(n) * int64(headDim)
	if total == 0 {
		return nil
	}
	need("CacheRows", "src", src, total, o.es())
	need("CacheRows", "cache", cache, int64(heads)*int64(maxLen)*int64(headDim), o.es())
	need("CacheRows", "at", at, 1, 4)
	c := o.begin(kCacheRows).ptr("src", src).ptr("cache", cache).i32("heads", heads).i32("n", n).i32("head_dim", headDim).
		flag("heads_inner", headsInner).i32("max_len", maxLen).ptr("at", at)
	return o.launch(c, o.strided(total), threads)
}

// decodeGrid is op_decode_attn's split of the cache: splits ranges of kps
// keys (a whole number of tiles) for each of kvHeads kv heads and chunks
// chunks of decRows group rows, on op_decode_attn_mma with mma.
type decodeGrid struct {
	splits, kps, chunks int
	mma                 bool
}

// decodeMMA reports whether a decoding attention runs on
// op_decode_attn_mma: bf16 with q, k and v 16-byte aligned (its loads).
func (o *Ops) decodeMMA(q, k, v gpu.Buffer) bool {
	return o.dt == dtype.BF16 && q.Ptr%16 == 0 && k.Ptr%16 == 0 && v.Ptr%16 == 0
}

// decodeGrid returns the split of the keys of a pass of span
// (tensor.CacheAt.Span) that gives about decBlocksPerSM blocks per
// multiprocessor at the span's shortest length, half of it (no split
// shorter than a tile, or on op_decode_attn_mma than a tile for each of
// its warps), and twice that at its longest: the attention of any length
// up to span runs on it, the splits past the length finding no key.
func (o *Ops) decodeGrid(heads, n, kvHeads, span int, mma bool) decodeGrid {
	chunks := (heads/max(kvHeads, 1)*n + decRows - 1) / decRows
	tile, least := decTile, 1 // keys per tile, tiles per split at least
	if mma {
		tile, least = decMMATile, decWarps
	}
	tiles := max(1, (span/2+tile-1)/tile)
	per := kvHeads * chunks // blocks of one split
	splits := min(max(1, tiles/least), max(1, (decBlocksPerSM*max(o.sms, 1)+per-1)/per))
	kps := (tiles + splits - 1) / splits * tile
	kps = max(kps, (span+decMaxSplits*tile-1)/(decMaxSplits*tile)*tile)
	return decodeGrid{splits: max(1, (span+kps-1)/kps), kps: kps, chunks: chunks, mma: mma}
}

// DecodeAttention launches op_decode_attn (op_decode_attn_mma with g.mma) over grid g, writing fp32
// partials into po [g.splits, heads·n, headDim] and pml [g.splits, heads·n,
// 2], then op_decode_combine into out [heads, n, headDim]. The kernel
// reads the keys it attends from at[1] on the device; length is its host
// copy, for the bounds.
func (o *Ops) DecodeAttention(q gpu.Buffer, heads, n, headDim int, k, v gpu.Buffer, kvHeads, maxLen, length int, at gpu.Buffer, causal bool, scale float64, po, pml gpu.Buffer, g decodeGrid, out gpu.Buffer) error {
	switch {
	case kvHeads <= 0 || heads%kvHeads != 0 || n <= 0 || length < 1 || length > maxLen || causal && length < n || length > g.splits*g.kps:
		panic(fmt.Sprintf("tensorcuda: DecodeAttention: %d heads over %d kv heads, %d rows, %d of %d keys (causal %v)", heads, kvHeads, n, length, maxLen, causal))
	case headDim%32 != 0 || headDim > decMaxD:
		panic(fmt.Sprintf("tensorcuda: DecodeAttention: head dimension %d is not a multiple of 32 up to %d", headDim, decMaxD))
	case g.splits > decMaxSplits:
		panic(fmt.Sprintf("tensorcuda: DecodeAttention: %d splits, more than %d", g.splits, decMaxSplits))
	case g.chunks > 65535 || kvHeads > 65535:
		panic(fmt.Sprintf("tensorcuda: DecodeAttention: %d kv heads × %d row chunks exceed the grid", kvHeads, g.chunks))
	}
	rows := int64(heads) * int64(n)
	need("DecodeAttention", "q", q, rows*int64(headDim), o.es())
	need("DecodeAttention", "out", out, rows*int64(headDim), o.es())
	need("DecodeAttention", "k", k, int64(kvHeads)*int64(maxLen)*int64(headDim), o.es())
	need("DecodeAttention", "v", v, int64(kvHeads)*int64(maxLen)*int64(headDim), o.es())
	need("DecodeAttention", "part_o", po, int64(g.splits)*rows*int64(headDim), 4)
	need("DecodeAttention", "part_ml", pml, int64(g.splits)*rows*2, 4)
	need("DecodeAttention", "at", at, 2, 4)
	kern := kDecodeAttn
	if g.mma {
		if !o.decodeMMA(q, k, v) {
			panic("tensorcuda: DecodeAttention: a tensor-core grid for operands it does not take")
		}
		kern = kDecodeAttnMMA
	}
	c := o.begin(kern).ptr("q", q).ptr("k", k).ptr("v", v).ptr("part_o", po).ptr("part_ml", pml).
		i32("heads", heads).i32("n", n).i32("head_dim", headDim).i32("kv_heads", kvHeads).i32("max_len", maxLen).
		ptr("at", at).flag("causal", causal).f32("scale", float32(scale)).i32("kps", g.kps)
	if err := o.launch(c, cuda.Dim(uint32(g.splits), uint32(kvHeads), uint32(g.chunks)), decWarps*32); err != nil {
		return err
	}
	c = o.begin(kDecodeCombine).ptr("part_o", po).ptr("part_ml", pml).ptr("out", out).i32("rows", int(rows)).
		i32("head_dim", headDim).i32("splits", g.splits)
	return o.launch(c, cuda.Dim(uint32(rows), 1, 1), decMaxD)
}
