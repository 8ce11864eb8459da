package flex

import "math"

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
	case opToInt:
		lo, hi := toInt(e.flo[a[0]]), toInt(e.fhi[a[0]])
		if e.nan[a[0]] { // NaN converts to 0
			lo, hi = min(lo, 0), max(hi, 0)
		}
		e.setI(i, lo, hi)
	default:
		info := &opTable[pn.op]
		if pn.kind == kFloat {
			var y fival
			if len(a) > 1 {
				y = fival{e.flo[a[1]], e.fhi[a[1]], e.nan[a[1]]}
			}
			r := info.fi(fival{e.flo[a[0]], e.fhi[a[0]], e.nan[a[0]]}, y)
			e.setF(i, r.lo, r.hi, r.nan)
		} else {
			var y ival
			if len(a) > 1 {
				y = ival{e.lo[a[1]], e.hi[a[1]]}
			}
			r := info.ii(ival{e.lo[a[0]], e.hi[a[0]]}, y)
			e.setI(i, r.lo, r.hi)
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
