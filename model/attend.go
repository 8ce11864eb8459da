package model

import (
	"fmt"
	"math"

	"dflash/tensor"
)

// AttendRows is attention for a few query rows against a key/value cache,
// without a block mask: for query head h (kv head g = h/(hq/len(k))) and
// row i < n, with m = keys(i) visible keys (rows 0..m−1 of k[g] and v[g],
// D values each),
//
//	out[h,i] = Σ_{j<m} softmax_j(scale·q[h,i]·k[g,j]) · v[g,j]
//
// and out[h,i] = 0 when m = 0. q and out are [hq, n, D] row-major (flex's
// layout for one batch). It is the decode path's replacement for
// flex.Forward when the mask is "the first keys(i) keys" (causal with an
// offset, or everything): no mask program and no block mask; the products
// run on b's GEMM, one pair per kv head (the query rows of its group
// stacked), so small ones stay on the calling goroutine. Every slice is in
// host memory: b is a CPU backend.
func AttendRows[T tensor.Float](b tensor.Backend[T], q []T, k, v [][]T, hq, n, D int, keys func(i int) int, scale float64, out []T) {
	hkv := len(k)
	if hkv == 0 || hq%hkv != 0 || len(v) != hkv || len(q) != hq*n*D || len(out) != len(q) {
		panic(fmt.Sprintf("model.AttendRows: q %d values for %d heads × %d rows × %d, %d/%d kv heads, out %d", len(q), hq, n, D, len(k), len(v), len(out)))
	}
	total := 0 // keys any row sees
	for i := range n {
		m := keys(i)
		if m < 0 || m*D > len(k[0]) {
			panic(fmt.Sprintf("model.AttendRows: row %d sees %d keys of %d", i, m, len(k[0])/D))
		}
		total = max(total, m)
	}
	rows := hq / hkv * n // query rows per kv head
	if total == 0 {
		clear(out)
		return
	}
	chunk := min(rows, max(1, attendScores/total)) // query rows per pair of products
	s := make(tensor.Host[T], chunk*total)
	for g := range hkv {
		for r0 := 0; r0 < rows; r0 += chunk {
			r1 := min(rows, r0+chunk)
			qc, oc := q[(g*rows+r0)*D:(g*rows+r1)*D], out[(g*rows+r0)*D:(g*rows+r1)*D]
			b.Gemm(false, true, r1-r0, total, D, T(scale), tensor.Host[T](qc), D, tensor.Host[T](k[g]), D, 0, s, total)
			for r := r0; r < r1; r++ {
				softmaxPrefix(s[(r-r0)*total:(r-r0+1)*total], keys(r%n))
			}
			b.Gemm(false, false, r1-r0, D, total, 1, s, total, tensor.Host[T](v[g]), D, 0, tensor.Host[T](oc), D)
		}
	}
}

// attendScores bounds AttendRows' score buffer (query rows × keys), so
// that a long prompt is attended in chunks of rows rather than with its
// whole score matrix at once.
const attendScores = 1 << 18

// softmaxPrefix replaces the first m values of s by their softmax (sums in
// float64) and the rest by 0.
func softmaxPrefix[T tensor.Float](s []T, m int) {
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
