package flex

import (
	"fmt"
	"math"

	"dflash/internal/ceil"
)

// blockKind says how a (q block, kv block) pair is masked inside a kernel.
type blockKind uint8

const (
	kindFull    blockKind = iota // every pair allowed: no mask
	kindPartial                  // evaluate the mask program per element
	kindDense                    // read a precomputed dense mask (reference path)
)

// tileMask is the mask of one q tile x kv block: per element, per row span
// of allowed columns, and per row group the union of its rows' spans.
type tileMask struct {
	m, n   int
	ok     []bool // m x n, row-major with stride n
	lo, hi []int32
	groups []span // per row group (rowGroup rows)
	cols   []span // per group of rowGroup columns: union of the rows allowing them
}

func newTileMask(bq, bkv int) *tileMask {
	return &tileMask{ok: make([]bool, bq*bkv), lo: make([]int32, bq), hi: make([]int32, bq),
		groups: make([]span, ceil.Div(bq, rowGroup)), cols: make([]span, ceil.Div(bkv, rowGroup))}
}

// evalProgram fills the mask of queries [q0, q0+m) x keys [k0, k0+n) of
// (b, h) from the mask program (ev must have had setBH(b, h)). It reports
// whether any pair is allowed.
func (t *tileMask) evalProgram(ev *rowEval, q0, m, k0, n int) bool {
	t.m, t.n = m, n
	for i := 0; i < m; i++ {
		ev.setRow(q0 + i)
		ev.mask(k0, n, t.ok[i*n:(i+1)*n])
	}
	return t.spans()
}

// fromDense fills ok (not the spans: the dense path computes every pair)
// from a dense row-major mask with row stride ld.
func (t *tileMask) fromDense(dm []bool, ld, q0, m, k0, n int) bool {
	t.m, t.n = m, n
	for i := 0; i < m; i++ {
		copy(t.ok[i*n:(i+1)*n], dm[(q0+i)*ld+k0:(q0+i)*ld+k0+n])
	}
	return true
}

// spans computes row, row-group and column-group spans from ok.
func (t *tileMask) spans() bool {
	m, n := t.m, t.n
	any := false
	for i := 0; i < m; i++ {
		row := t.ok[i*n : (i+1)*n]
		lo, hi := -1, -1
		for j, v := range row {
			if v {
				if lo < 0 {
					lo = j
				}
				hi = j
			}
		}
		if lo < 0 {
			t.lo[i], t.hi[i] = 0, 0
		} else {
			t.lo[i], t.hi[i] = int32(lo), int32(hi+1)
			any = true
		}
	}
	for g := 0; g*rowGroup < m; g++ {
		s := span{int32(n), 0}
		for i := g * rowGroup; i < min((g+1)*rowGroup, m); i++ {
			if t.lo[i] < t.hi[i] {
				s.lo, s.hi = min(s.lo, t.lo[i]), max(s.hi, t.hi[i])
			}
		}
		if s.lo >= s.hi {
			s = span{}
		}
		t.groups[g] = s
	}
	for g := 0; g*rowGroup < n; g++ {
		s := span{int32(m), 0}
		for i := 0; i < m; i++ {
			if t.lo[i] < t.hi[i] && int(t.lo[i]) < min((g+1)*rowGroup, n) && int(t.hi[i]) > g*rowGroup {
				if s.lo == int32(m) {
					s.lo = int32(i)
				}
				s.hi = int32(i + 1)
			}
		}
		if s.lo >= s.hi {
			s = span{}
		}
		t.cols[g] = s
	}
	return any
}

// expShift sets s[j] = exp(s[j] - mx) and returns the sum of the results.
func expShift[T elem](s []T, mx float64) float64 {
	sum := 0.0
	switch v := any(s).(type) {
	case []float32:
		m := float32(mx)
		if hasAVX2FMA {
			return float64(expShift32(v, m))
		}
		for j, x := range v {
			e := exp32(x - m)
			v[j] = e
			sum += float64(e)
		}
	case []float64:
		for j, x := range v {
			e := math.Exp(x - mx)
			v[j] = e
			sum += e
		}
	}
	return sum
}

// exp32 returns e^x in float32 precision (relative error about 1e-7),
// faster than math.Exp: x = n·ln2 + r with |r| <= ln2/2 (Cody-Waite split
// of ln2), e^r = 1 + r + r²·P(r) with a degree-5 polynomial P, and 2^n set
// in the exponent bits. It returns 0 below -87.3 (no denormals), +Inf above
// 88.72 and NaN for NaN.
func exp32(x float32) float32 {
	if !(x >= -87.3) { // also NaN
		if x != x {
			return x
		}
		return 0
	}
	if x > 88.72 {
		return float32(math.Inf(1))
	}
	const log2e = 1.44269504088896341
	const ln2hi = 0.693359375
	const ln2lo = -2.12194440e-4
	z := x * log2e
	var n int32
	if z >= 0 {
		n = int32(z + 0.5)
	} else {
		n = int32(z - 0.5)
	}
	fn := float32(n)
	r := x - fn*ln2hi - fn*ln2lo
	p := ((((1.9875691500e-4*r+1.3981999507e-3)*r+8.3334519073e-3)*r+4.1665795894e-2)*r+1.6666665459e-1)*r + 5.0000001201e-1
	y := p*r*r + r + 1
	if n > 127 { // 2^128 does not fit the exponent: apply one factor 2 to y
		y *= 2
		n--
	}
	return y * math.Float32frombits(uint32(n+127)<<23)
}

// checkLen panics when a buffer does not have the length its dims require.
func checkLen(what string, got, want int) {
	if got != want {
		panic(fmt.Sprintf("flex: %s has %d elements, dims need %d", what, got, want))
	}
}

// checkMask panics when d is invalid or does not fit a mask (named what)
// built for dims built; the head count matters only when the mask reads the
// head (maskHeads != 1).
func checkMask(what string, d, built Dims, maskHeads int) {
	if err := d.Check(); err != nil {
		panic(err.Error())
	}
	if built.Batch != d.Batch || built.LenQ != d.LenQ || built.LenKV != d.LenKV ||
		(maskHeads != 1 && built.HeadsQ != d.HeadsQ) {
		panic(fmt.Sprintf("flex: %s built for dims %+v, used with %+v", what, built, d))
	}
}

func checkDims(d Dims, bm *BlockMask) { checkMask("block mask", d, bm.Dims, bm.MaskHeads) }
