package tensor

import (
	"fmt"
	"math"
)

// AllocKeep returns n zero elements of host memory (Alloc).
func (c *CPU[T]) AllocKeep(n int) Storage[T] { return make(Host[T], n) }

// FreeKeep does nothing: the garbage collector owns the memory.
func (c *CPU[T]) FreeKeep(Storage[T]) {}

// CacheRows writes n rows of every head into the cache at rows at.Past...
func (c *CPU[T]) CacheRows(srcS Storage[T], heads, n, headDim int, headsInner bool, cacheS Storage[T], maxLen int, at CacheAt) {
	src, cache := HostData(srcS, "CacheRows src"), HostData(cacheS, "CacheRows cache")
	past, length := at.read("CacheRows")
	if length-past != n {
		panic(fmt.Sprintf("tensor: CacheRows: %d rows into positions %d..%d", n, past, length))
	}
	checkCacheRows(len(src), heads, n, headDim, len(cache), maxLen, past)
	for h := range heads {
		for t := range n {
			at := (h*n + t) * headDim
			if headsInner {
				at = (t*heads + h) * headDim
			}
			copy(cache[(h*maxLen+past+t)*headDim:][:headDim], src[at:at+headDim])
		}
	}
}

// checkCacheRows panics unless CacheRows' sizes fit.
func checkCacheRows(src, heads, n, headDim, cache, maxLen, past int) {
	if src != heads*n*headDim || cache != heads*maxLen*headDim || past < 0 || past+n > maxLen {
		panic(fmt.Sprintf("tensor: CacheRows: %d values for %d heads × %d rows × %d into a cache of %d values (%d heads × %d rows) at row %d",
			src, heads, n, headDim, cache, heads, maxLen, past))
	}
}

// read returns at's positions as the kernels see them, from at.At (the
// CPU's host ints), and panics, naming op, when they are not at's own.
func (at CacheAt) read(op string) (past, length int) {
	h, ok := at.At.(HostInts)
	if !ok || len(h) != 2 || int(h[0]) != at.Past || int(h[1]) != at.Len {
		panic(fmt.Sprintf("tensor: %s: positions %v on the backend for %d..%d", op, at.At, at.Past, at.Len))
	}
	return int(h[0]), int(h[1])
}

// checkDecodeAttention panics unless DecodeAttention's sizes fit.
func checkDecodeAttention(q, heads, n, headDim, k, v, kvHeads, maxLen, length, out int, causal bool) {
	if kvHeads <= 0 || heads%kvHeads != 0 || n <= 0 || q != heads*n*headDim || out != q ||
		k != kvHeads*maxLen*headDim || v != k || length > maxLen || length < 0 || causal && length < n {
		panic(fmt.Sprintf("tensor: DecodeAttention: q %d values for %d heads × %d rows × %d, out %d, k/v %d/%d values for %d kv heads × %d rows, length %d (causal %v)",
			q, heads, n, headDim, out, k, v, kvHeads, maxLen, length, causal))
	}
}

// DecodeAttention attends the query rows to the cache's first at.Len keys
// (see Backend.DecodeAttention), one pair of products per kv head on c's
// GEMM (the query rows of its group stacked), so that small ones stay on
// the calling goroutine.
func (c *CPU[T]) DecodeAttention(qS Storage[T], heads, n, headDim int, kS, vS Storage[T], kvHeads, maxLen int, at CacheAt, causal bool, scale float64, outS Storage[T]) {
	q, k, v, out := HostData(qS, "DecodeAttention q"), HostData(kS, "DecodeAttention k"), HostData(vS, "DecodeAttention v"), HostData(outS, "DecodeAttention out")
	_, length := at.read("DecodeAttention")
	checkDecodeAttention(len(q), heads, n, headDim, len(k), len(v), kvHeads, maxLen, length, len(out), causal)
	keys := func(int) int { return length }
	if causal {
		keys = func(i int) int { return length - n + i + 1 }
	}
	ks, vs := make([][]T, kvHeads), make([][]T, kvHeads)
	for g := range ks {
		ks[g], vs[g] = k[g*maxLen*headDim:(g*maxLen+length)*headDim], v[g*maxLen*headDim:(g*maxLen+length)*headDim]
	}
	attendRows(c, q, ks, vs, heads, n, headDim, keys, scale, out)
}

// attendRows is attention for a few query rows against a key/value cache,
// without a block mask: for query head h (kv head g = h/(hq/len(k))) and
// row i < n, with m = keys(i) visible keys (rows 0..m−1 of k[g] and v[g],
// D values each),
//
//	out[h,i] = Σ_{j<m} softmax_j(scale·q[h,i]·k[g,j]) · v[g,j]
//
// and out[h,i] = 0 when m = 0. q and out are [hq, n, D] row-major (flex's
// layout for one batch). The products run on b's GEMM, one pair per kv
// head (the query rows of its group stacked).
func attendRows[T Float](b Backend[T], q []T, k, v [][]T, hq, n, D int, keys func(i int) int, scale float64, out []T) {
	hkv := len(k)
	if hkv == 0 || hq%hkv != 0 || len(v) != hkv || len(q) != hq*n*D || len(out) != len(q) {
		panic(fmt.Sprintf("tensor.attendRows: q %d values for %d heads × %d rows × %d, %d/%d kv heads, out %d", len(q), hq, n, D, len(k), len(v), len(out)))
	}
	total := 0 // keys any row sees
	for i := range n {
		m := keys(i)
		if m < 0 || m*D > len(k[0]) {
			panic(fmt.Sprintf("tensor.attendRows: row %d sees %d keys of %d", i, m, len(k[0])/D))
		}
		total = max(total, m)
	}
	rows := hq / hkv * n // query rows per kv head
	if total == 0 {
		clear(out)
		return
	}
	chunk := min(rows, max(1, attendScores/total)) // query rows per pair of products
	s := make(Host[T], chunk*total)
	for g := range hkv {
		for r0 := 0; r0 < rows; r0 += chunk {
			r1 := min(rows, r0+chunk)
			qc, oc := q[(g*rows+r0)*D:(g*rows+r1)*D], out[(g*rows+r0)*D:(g*rows+r1)*D]
			b.Gemm(false, true, r1-r0, total, D, T(scale), Host[T](qc), D, Host[T](k[g]), D, 0, s, total)
			for r := r0; r < r1; r++ {
				softmaxPrefix(s[(r-r0)*total:(r-r0+1)*total], keys(r%n))
			}
			b.Gemm(false, false, r1-r0, D, total, 1, s, total, Host[T](v[g]), D, 0, Host[T](oc), D)
		}
	}
}

// attendScores bounds attendRows' score buffer (query rows × keys), so
// that a long prompt is attended in chunks of rows rather than with its
// whole score matrix at once.
const attendScores = 1 << 18

// softmaxPrefix replaces the first m values of s by their softmax (sums in
// float64) and the rest by 0.
func softmaxPrefix[T Float](s []T, m int) {
	clear(s[m:])
	if m == 0 {
		return
	}
	p := s[:m]
	mx := math.Inf(-1)
	for _, x := range p {
		mx = max(mx, float64(x))
	}
	var z float64
	for j, x := range p {
		e := math.Exp(float64(x) - mx)
		p[j] = T(e)
		z += e
	}
	for j := range p {
		p[j] = T(float64(p[j]) / z)
	}
}
