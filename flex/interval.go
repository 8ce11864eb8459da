package flex

import (
	"math"
	"math/bits"
)

// ivalEval evaluates a plan over a block: b and h fixed, q in [q0, q1),
// kv in [k0, k1). Every node gets a sound enclosure of all the values it can
// take over the block: [lo, hi] for ints, [flo, fhi] plus a may-be-NaN flag
// for floats, and can-be-true / can-be-false for bools.
type ivalEval struct {
	p        *plan
	f        *frame
	lo, hi   []int64
	flo, fhi []float64
	nan      []bool
	ct, cf   []bool
	ilo, ihi []int // index box of a tensor read
	odo      []int // box odometer
	rows     []int // nodes that do not depend on kv
	cols     []int // nodes that do
	b, h     int
	q0, q1   int
}

func newIvalEval(p *plan, f *frame) *ivalEval {
	n := len(p.nodes)
	e := &ivalEval{p: p, f: f, lo: make([]int64, n), hi: make([]int64, n),
		flo: make([]float64, n), fhi: make([]float64, n), nan: make([]bool, n),
		ct: make([]bool, n), cf: make([]bool, n)}
	for i := range p.nodes {
		if p.nodes[i].level < 2 {
			e.rows = append(e.rows, i)
		} else {
			e.cols = append(e.cols, i)
		}
	}
	return e
}

// setRows evaluates the nodes that do not depend on kv for batch b, head h
// and queries [q0, q1).
func (e *ivalEval) setRows(b, h, q0, q1 int) {
	e.b, e.h, e.q0, e.q1 = b, h, q0, q1
	for _, i := range e.rows {
		e.eval(i, b, h, q0, q1, 0, 1)
	}
}

// classify returns whether the mask can be true and can be false somewhere
// in the block of keys [k0, k1) (after setRows).
func (e *ivalEval) classify(k0, k1 int) (canT, canF bool) {
	for _, i := range e.cols {
		e.eval(i, e.b, e.h, e.q0, e.q1, k0, k1)
	}
	return e.ct[e.p.root], e.cf[e.p.root]
}

func (e *ivalEval) setI(i int, lo, hi int64) { e.lo[i], e.hi[i] = lo, hi }

func (e *ivalEval) setB(i int, t, f bool) { e.ct[i], e.cf[i] = t, f }

func (e *ivalEval) setF(i int, lo, hi float64, nan bool) {
	if lo != lo || hi != hi { // NaN bound: the value may be anything
		lo, hi, nan = math.Inf(-1), math.Inf(1), true
	}
	e.flo[i], e.fhi[i], e.nan[i] = lo, hi, nan
}

const (
	minI = math.MinInt64
	maxI = math.MaxInt64
)

func (e *ivalEval) eval(i, b, h, q0, q1, k0, k1 int) {
	pn := &e.p.nodes[i]
	a := pn.args
	switch pn.op {
	case opB:
		e.setI(i, int64(b), int64(b))
	case opH:
		e.setI(i, int64(h), int64(h))
	case opQ:
		e.setI(i, int64(q0), int64(q1-1))
	case opKV:
		e.setI(i, int64(k0), int64(k1-1))
	case opScore:
		e.setF(i, math.Inf(-1), math.Inf(1), true)
	case opConst:
		e.setI(i, pn.ival, pn.ival)
	case opFConst:
		e.setF(i, pn.fval, pn.fval, false)
	case opIScalar:
		v := e.f.ints[pn.param]
		e.setI(i, v, v)
	case opFScalar:
		v := e.f.floats[pn.param]
		e.setF(i, v, v, v != v)
	case opITensor, opFTensor:
		t := e.f.tensors[pn.param]
		lo, hi := e.ilo[:0], e.ihi[:0]
		for d, x := range a {
			lo = append(lo, clampIndex(e.lo[x], t.shape[d]))
			hi = append(hi, clampIndex(e.hi[x], t.shape[d]))
		}
		e.ilo, e.ihi = lo, hi
		var mn, mx float64
		var nan bool
		mn, mx, nan, e.odo = t.rmq.box(lo, hi, e.odo)
		if pn.op == opITensor {
			e.setI(i, int64(mn), int64(mx))
		} else {
			e.setF(i, mn, mx, nan)
		}
	case opToFloat:
		e.setF(i, float64(e.lo[a[0]]), float64(e.hi[a[0]]), false)
	case opSelect:
		t, f := e.ct[a[0]], e.cf[a[0]]
		x, y := a[1], a[2]
		if !f {
			y = x
		} else if !t {
			x = y
		}
		switch pn.kind {
		case kInt:
			e.setI(i, min(e.lo[x], e.lo[y]), max(e.hi[x], e.hi[y]))
		case kFloat:
			e.setF(i, math.Min(e.flo[x], e.flo[y]), math.Max(e.fhi[x], e.fhi[y]), e.nan[x] || e.nan[y])
		default:
			e.setB(i, e.ct[x] || e.ct[y], e.cf[x] || e.cf[y])
		}
	case opAnd:
		e.setB(i, e.ct[a[0]] && e.ct[a[1]], e.cf[a[0]] || e.cf[a[1]])
	case opOr:
		e.setB(i, e.ct[a[0]] || e.ct[a[1]], e.cf[a[0]] && e.cf[a[1]])
	case opNot:
		e.setB(i, e.cf[a[0]], e.ct[a[0]])
	case opLt, opLe, opGt, opGe, opEq, opNe:
		if e.p.nodes[a[0]].kind == kFloat {
			t, f := cmpInterval(pn.op, e.flo[a[0]], e.fhi[a[0]], e.flo[a[1]], e.fhi[a[1]])
			if e.nan[a[0]] || e.nan[a[1]] { // comparisons with NaN are false, except !=
				if pn.op == opNe {
					t = true
				} else {
					f = true
				}
			}
			e.setB(i, t, f)
		} else {
			t, f := cmpInterval(pn.op, e.lo[a[0]], e.hi[a[0]], e.lo[a[1]], e.hi[a[1]])
			e.setB(i, t, f)
		}
	default:
		if pn.kind == kFloat {
			e.floatArith(i, pn.op, a)
		} else {
			e.intArith(i, pn.op, a)
		}
	}
}

// cmpInterval returns whether x op y can be true and can be false for some
// x in [xl, xh], y in [yl, yh] (NaN handled by the caller).
func cmpInterval[T int64 | float64](o op, xl, xh, yl, yh T) (t, f bool) {
	switch o {
	case opLt:
		return xl < yh, xh >= yl
	case opLe:
		return xl <= yh, xh > yl
	case opGt:
		return xh > yl, xl <= yh
	case opGe:
		return xh >= yl, xl < yh
	case opEq:
		return xl <= yh && yl <= xh, !(xl == xh && yl == yh && xl == yl)
	}
	return !(xl == xh && yl == yh && xl == yl), xl <= yh && yl <= xh
}

func (e *ivalEval) intArith(i int, o op, a []int) {
	xl, xh := e.lo[a[0]], e.hi[a[0]]
	var yl, yh int64
	if len(a) > 1 {
		yl, yh = e.lo[a[1]], e.hi[a[1]]
	}
	full := func() { e.setI(i, minI, maxI) }
	switch o {
	case opAdd:
		lo, ok1 := addOK(xl, yl)
		hi, ok2 := addOK(xh, yh)
		if !ok1 || !ok2 {
			full()
			return
		}
		e.setI(i, lo, hi)
	case opSub:
		lo, ok1 := addOK(xl, negSat(yh))
		hi, ok2 := addOK(xh, negSat(yl))
		if !ok1 || !ok2 || yh == minI || yl == minI {
			full()
			return
		}
		e.setI(i, lo, hi)
	case opNeg:
		if xl == minI {
			full()
			return
		}
		e.setI(i, -xh, -xl)
	case opAbs:
		if xl == minI {
			full()
			return
		}
		switch {
		case xl >= 0:
			e.setI(i, xl, xh)
		case xh <= 0:
			e.setI(i, -xh, -xl)
		default:
			e.setI(i, 0, max(-xl, xh))
		}
	case opMin:
		e.setI(i, min(xl, yl), min(xh, yh))
	case opMax:
		e.setI(i, max(xl, yl), max(xh, yh))
	case opMul:
		lo, hi := int64(maxI), int64(minI)
		for _, x := range [2]int64{xl, xh} {
			for _, y := range [2]int64{yl, yh} {
				p, ok := mulOK(x, y)
				if !ok {
					full()
					return
				}
				lo, hi = min(lo, p), max(hi, p)
			}
		}
		e.setI(i, lo, hi)
	case opDiv:
		// Truncated division is monotone in x for fixed y != 0 and, on each
		// side of 0, in y for fixed x, so with 0 outside [yl, yh] the extremes
		// are at corners. With 0 inside, |x / y| <= |x| and x / 0 = 0.
		if yl <= 0 && yh >= 0 {
			if xl == minI {
				full()
				return
			}
			m := max(abs64(xl), abs64(xh))
			e.setI(i, -m, m)
			return
		}
		lo, hi := int64(maxI), int64(minI)
		for _, x := range [2]int64{xl, xh} {
			for _, y := range [2]int64{yl, yh} {
				v := idiv(x, y)
				lo, hi = min(lo, v), max(hi, v)
			}
		}
		e.setI(i, lo, hi)
	case opMod:
		if yl == minI {
			full()
			return
		}
		m := max(abs64(yl), abs64(yh)) // |x % y| < |y| <= m
		if yl == yh && yl > 0 && xl >= 0 && xl/yl == xh/yl {
			e.setI(i, xl%yl, xh%yl) // one period: exact
			return
		}
		switch {
		case m == 0:
			e.setI(i, 0, 0)
		case xl >= 0:
			e.setI(i, 0, min(xh, m-1))
		case xh <= 0:
			e.setI(i, max(xl, -(m-1)), 0)
		default:
			e.setI(i, max(xl, -(m-1)), min(xh, m-1))
		}
	default:
		panic("flex: interval of int op " + o.String())
	}
}

func (e *ivalEval) floatArith(i int, o op, a []int) {
	xl, xh, xn := e.flo[a[0]], e.fhi[a[0]], e.nan[a[0]]
	var yl, yh float64
	yn := false
	if len(a) > 1 {
		yl, yh, yn = e.flo[a[1]], e.fhi[a[1]], e.nan[a[1]]
	}
	nan := xn || yn
	corners := func(f func(x, y float64) float64) {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, x := range [2]float64{xl, xh} {
			for _, y := range [2]float64{yl, yh} {
				v := f(x, y)
				if v != v {
					nan = true
					continue
				}
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		if nan && lo > hi {
			lo, hi = math.Inf(-1), math.Inf(1)
		}
		e.setF(i, lo, hi, nan)
	}
	switch o {
	case opAdd:
		corners(func(x, y float64) float64 { return x + y })
		if math.IsInf(xl, -1) && math.IsInf(yh, 1) || math.IsInf(xh, 1) && math.IsInf(yl, -1) {
			e.setF(i, math.Inf(-1), math.Inf(1), true)
		}
	case opSub:
		corners(func(x, y float64) float64 { return x - y })
		if math.IsInf(xl, -1) && math.IsInf(yl, -1) || math.IsInf(xh, 1) && math.IsInf(yh, 1) {
			e.setF(i, math.Inf(-1), math.Inf(1), true)
		}
	case opMul:
		corners(func(x, y float64) float64 { return x * y })
		if (math.IsInf(xl, 0) || math.IsInf(xh, 0)) && yl <= 0 && yh >= 0 ||
			(math.IsInf(yl, 0) || math.IsInf(yh, 0)) && xl <= 0 && xh >= 0 {
			e.setF(i, math.Inf(-1), math.Inf(1), true) // inf * 0
		}
	case opDiv:
		if yl <= 0 && yh >= 0 {
			e.setF(i, math.Inf(-1), math.Inf(1), true)
			return
		}
		corners(func(x, y float64) float64 { return x / y })
		if (math.IsInf(xl, 0) || math.IsInf(xh, 0)) && (math.IsInf(yl, 0) || math.IsInf(yh, 0)) {
			e.setF(i, math.Inf(-1), math.Inf(1), true)
		}
	case opNeg:
		e.setF(i, -xh, -xl, nan)
	case opAbs:
		switch {
		case xl >= 0:
			e.setF(i, xl, xh, nan)
		case xh <= 0:
			e.setF(i, -xh, -xl, nan)
		default:
			e.setF(i, 0, math.Max(-xl, xh), nan)
		}
	case opMin:
		// fmin ignores a NaN operand, so the result is NaN only when both are.
		lo, hi := math.Min(xl, yl), math.Min(xh, yh)
		if xn {
			lo, hi = math.Min(lo, yl), math.Max(hi, yh)
		}
		if yn {
			lo, hi = math.Min(lo, xl), math.Max(hi, xh)
		}
		e.setF(i, lo, hi, xn && yn)
	case opMax:
		lo, hi := math.Max(xl, yl), math.Max(xh, yh)
		if xn {
			lo, hi = math.Min(lo, yl), math.Max(hi, yh)
		}
		if yn {
			lo, hi = math.Min(lo, xl), math.Max(hi, xh)
		}
		e.setF(i, lo, hi, xn && yn)
	case opExp:
		e.setF(i, math.Exp(xl), math.Exp(xh), nan)
	case opTanh:
		e.setF(i, math.Tanh(xl), math.Tanh(xh), nan)
	default:
		panic("flex: interval of float op " + o.String())
	}
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

func negSat(x int64) int64 {
	if x == minI {
		return maxI
	}
	return -x
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
