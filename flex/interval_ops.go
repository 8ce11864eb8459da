package flex

import (
	"math"
	"math/bits"
	"strconv"
)

// The interval rules of opTable. Each returns an enclosure of every value
// the op takes for operands in the given intervals: sound, so that block
// masks built from them are; where a rule cannot bound the result (int
// overflow, a NaN it cannot place) it returns the whole range.

const (
	minI = math.MinInt64
	maxI = math.MaxInt64
)

var (
	fullI = ival{minI, maxI}
	fullF = fival{math.Inf(-1), math.Inf(1), true}
)

// hull collects values into the smallest interval holding them.
type hull struct{ lo, hi int64 }

func newHull() hull { return hull{maxI, minI} }

func (h *hull) add(v int64) { h.lo, h.hi = min(h.lo, v), max(h.hi, v) }

// corners returns the hull of f over the corners of x × y, or fullI when
// ok reports an overflow at one of them. It is exact for functions that are
// monotone in each operand while the other is fixed.
func corners(x, y ival, f func(x, y int64) (int64, bool)) ival {
	h := newHull()
	for _, a := range [2]int64{x.lo, x.hi} {
		for _, b := range [2]int64{y.lo, y.hi} {
			v, ok := f(a, b)
			if !ok {
				return fullI
			}
			h.add(v)
		}
	}
	return ival(h)
}

func ivalAdd(x, y ival) ival {
	return corners(x, y, addOK)
}

func ivalSub(x, y ival) ival {
	if y.lo == minI {
		return fullI
	}
	return corners(x, ival{-y.hi, -y.lo}, addOK)
}

func ivalMul(x, y ival) ival { return corners(x, y, mulOK) }

func ivalNeg(x, _ ival) ival {
	if x.lo == minI {
		return fullI
	}
	return ival{-x.hi, -x.lo}
}

func ivalAbs(x, _ ival) ival {
	switch {
	case x.lo == minI:
		return fullI
	case x.lo >= 0:
		return x
	case x.hi <= 0:
		return ival{-x.hi, -x.lo}
	}
	return ival{0, max(-x.lo, x.hi)}
}

// ivalDivLike bounds floor or truncated division: both are monotone in x
// for a fixed y != 0 and in y on each side of 0 for a fixed x, so the
// extremes lie at the corners of the negative and positive parts of y;
// y = 0 gives 0.
func ivalDivLike(x, y ival, div func(x, y int64) int64) ival {
	if x.lo == minI {
		return fullI // minI / -1 wraps
	}
	h := newHull()
	part := func(lo, hi int64) {
		r := corners(x, ival{lo, hi}, func(a, b int64) (int64, bool) { return div(a, b), true })
		h.add(r.lo)
		h.add(r.hi)
	}
	if y.lo <= -1 {
		part(y.lo, min(y.hi, -1))
	}
	if y.hi >= 1 {
		part(max(y.lo, 1), y.hi)
	}
	if y.lo <= 0 && y.hi >= 0 {
		h.add(0)
	}
	return ival(h)
}

func ivalFloorDiv(x, y ival) ival { return ivalDivLike(x, y, floorDiv) }

func ivalTruncDiv(x, y ival) ival { return ivalDivLike(x, y, truncDiv) }

// ivalFloorMod: x % y lies in [0, y-1] for y > 0 (and <= x when x >= 0), in
// [y+1, 0] for y < 0 (and >= x when x <= 0), is 0 for y = 0, and is exact
// within one period of a constant positive y.
func ivalFloorMod(x, y ival) ival {
	if y.lo == minI {
		return fullI
	}
	if y.lo == y.hi && y.lo > 0 && floorDiv(x.lo, y.lo) == floorDiv(x.hi, y.lo) {
		return ival{floorMod(x.lo, y.lo), floorMod(x.hi, y.lo)}
	}
	r := ival{0, 0}
	if y.hi >= 1 {
		hi := y.hi - 1
		if x.lo >= 0 {
			hi = min(hi, x.hi)
		}
		r.hi = hi
	}
	if y.lo <= -1 {
		lo := y.lo + 1
		if x.hi <= 0 {
			lo = max(lo, x.lo)
		}
		r.lo = lo
	}
	return r
}

// ivalTruncMod: |x % y| < |y|, with the sign of x; exact within one period
// of a constant positive y and non-negative x.
func ivalTruncMod(x, y ival) ival {
	if y.lo == minI {
		return fullI
	}
	m := max(abs64(y.lo), abs64(y.hi)) // |x % y| < |y| <= m
	if y.lo == y.hi && y.lo > 0 && x.lo >= 0 && x.lo/y.lo == x.hi/y.lo {
		return ival{x.lo % y.lo, x.hi % y.lo}
	}
	switch {
	case m == 0:
		return ival{0, 0}
	case x.lo >= 0:
		return ival{0, min(x.hi, m-1)}
	case x.hi <= 0:
		return ival{max(x.lo, -(m - 1)), 0}
	}
	return ival{max(x.lo, -(m - 1)), min(x.hi, m-1)}
}

// bitsHull is [-2^k, 2^k - 1] for the least k that holds every bound in
// two's complement: and, or and xor of such values stay in it.
func bitsHull(xs ...int64) ival {
	k := 0
	for _, v := range xs {
		if v < 0 {
			v = ^v
		}
		k = max(k, bits.Len64(uint64(v)))
	}
	if k >= 63 {
		return fullI
	}
	return ival{-1 << k, 1<<k - 1}
}

// ivalBitAnd: a non-negative operand bounds x & y to [0, its maximum].
func ivalBitAnd(x, y ival) ival {
	switch {
	case x.lo >= 0 && y.lo >= 0:
		return ival{0, min(x.hi, y.hi)}
	case x.lo >= 0:
		return ival{0, x.hi}
	case y.lo >= 0:
		return ival{0, y.hi}
	}
	return bitsHull(x.lo, x.hi, y.lo, y.hi)
}

// ivalBitOr: for non-negative operands x | y >= max(x, y).
func ivalBitOr(x, y ival) ival {
	h := bitsHull(x.lo, x.hi, y.lo, y.hi)
	if x.lo >= 0 && y.lo >= 0 {
		return ival{max(x.lo, y.lo), h.hi}
	}
	return h
}

func ivalBitXor(x, y ival) ival {
	h := bitsHull(x.lo, x.hi, y.lo, y.hi)
	if x.lo >= 0 && y.lo >= 0 {
		return ival{0, h.hi}
	}
	return h
}

// ivalShl: x << s is monotone in x and, for a fixed x, in s; it is bounded
// unless a corner overflows.
func ivalShl(x, s ival) ival {
	s = ival{int64(shiftCount(s.lo)), int64(shiftCount(s.hi))}
	return corners(x, s, func(a, b int64) (int64, bool) {
		v := a << uint(b)
		return v, v>>uint(b) == a
	})
}

func ivalShr(x, s ival) ival {
	s = ival{int64(shiftCount(s.lo)), int64(shiftCount(s.hi))}
	return corners(x, s, func(a, b int64) (int64, bool) { return a >> uint(b), true })
}

func addOK(x, y int64) (int64, bool) {
	s := x + y
	return s, !((x >= 0) == (y >= 0) && (s >= 0) != (x >= 0))
}

func mulOK(x, y int64) (int64, bool) {
	if x == 0 || y == 0 {
		return 0, true
	}
	hi, lo := bits.Mul64(uint64(abs64(x)), uint64(abs64(y)))
	if hi != 0 || lo > math.MaxInt64 || x == minI || y == minI {
		return 0, false
	}
	return x * y, true
}

// fcorners returns the hull of f over the corners of x × y, with NaN
// possible when an operand or a corner may be NaN.
func fcorners(x, y fival, f func(x, y float64) float64) fival {
	r := fival{math.Inf(1), math.Inf(-1), x.nan || y.nan}
	for _, a := range [2]float64{x.lo, x.hi} {
		for _, b := range [2]float64{y.lo, y.hi} {
			v := f(a, b)
			if v != v {
				r.nan = true
				continue
			}
			r.lo, r.hi = math.Min(r.lo, v), math.Max(r.hi, v)
		}
	}
	if r.lo > r.hi {
		return fullF
	}
	return r
}

func fivalAdd(x, y fival) fival {
	if math.IsInf(x.lo, -1) && math.IsInf(y.hi, 1) || math.IsInf(x.hi, 1) && math.IsInf(y.lo, -1) {
		return fullF // inf - inf
	}
	return fcorners(x, y, func(a, b float64) float64 { return a + b })
}

func fivalSub(x, y fival) fival {
	if math.IsInf(x.lo, -1) && math.IsInf(y.lo, -1) || math.IsInf(x.hi, 1) && math.IsInf(y.hi, 1) {
		return fullF
	}
	return fcorners(x, y, func(a, b float64) float64 { return a - b })
}

func fivalMul(x, y fival) fival {
	if (math.IsInf(x.lo, 0) || math.IsInf(x.hi, 0)) && y.lo <= 0 && y.hi >= 0 ||
		(math.IsInf(y.lo, 0) || math.IsInf(y.hi, 0)) && x.lo <= 0 && x.hi >= 0 {
		return fullF // inf * 0
	}
	return fcorners(x, y, func(a, b float64) float64 { return a * b })
}

func fivalDiv(x, y fival) fival {
	if y.lo <= 0 && y.hi >= 0 ||
		(math.IsInf(x.lo, 0) || math.IsInf(x.hi, 0)) && (math.IsInf(y.lo, 0) || math.IsInf(y.hi, 0)) {
		return fullF
	}
	return fcorners(x, y, func(a, b float64) float64 { return a / b })
}

func fivalAbs(x, _ fival) fival {
	switch {
	case x.lo >= 0:
		return x
	case x.hi <= 0:
		return fival{-x.hi, -x.lo, x.nan}
	}
	return fival{0, math.Max(-x.lo, x.hi), x.nan}
}

// fivalMin and fivalMax: fmin/fmax ignore a NaN operand, so the result is
// NaN only when both are, and may be the other operand's value.
func fivalMin(x, y fival) fival {
	r := fival{math.Min(x.lo, y.lo), math.Min(x.hi, y.hi), x.nan && y.nan}
	return widenNaN(r, x, y)
}

func fivalMax(x, y fival) fival {
	r := fival{math.Max(x.lo, y.lo), math.Max(x.hi, y.hi), x.nan && y.nan}
	return widenNaN(r, x, y)
}

func widenNaN(r, x, y fival) fival {
	if x.nan {
		r.lo, r.hi = math.Min(r.lo, y.lo), math.Max(r.hi, y.hi)
	}
	if y.nan {
		r.lo, r.hi = math.Min(r.lo, x.lo), math.Max(r.hi, x.hi)
	}
	return r
}

// monotone is the rule of a non-decreasing unary function.
func monotone(f func(float64) float64) func(x, _ fival) fival {
	return func(x, _ fival) fival { return fival{f(x.lo), f(x.hi), x.nan} }
}

// fivalLogSqrt is the rule of log and sqrt: non-decreasing on [0, inf],
// NaN below 0.
func fivalLogSqrt(f func(float64) float64) func(x, _ fival) fival {
	return func(x, _ fival) fival {
		if x.hi < 0 {
			return fullF
		}
		return fival{f(math.Max(x.lo, 0)), f(x.hi), x.nan || x.lo < 0}
	}
}

// fivalPow: for x > 0 (or x >= +0), x^y is monotone in each operand for a
// fixed other one, so the corners bound it; x = -0 with y < 0 may give
// -Inf (pow(-0, odd negative) is -Inf); a negative base or a NaN operand
// gives the whole range.
func fivalPow(x, y fival) fival {
	if x.nan || y.nan || x.lo < 0 {
		return fullF
	}
	r := fcorners(fival{math.Max(x.lo, 0), x.hi, false}, y, math.Pow)
	if x.lo == 0 && y.lo < 0 {
		r.lo = math.Inf(-1)
	}
	return r
}

// itoa prints an int constant for C, parenthesised when negative.
func itoa(v int64) string {
	s := strconv.FormatInt(v, 10)
	if v < 0 {
		return "(" + s + ")"
	}
	return s
}
