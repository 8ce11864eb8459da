package flex

// The vector closures of row evaluation. Each closure runs one node over n
// kv positions as a plain loop. The loop is written once, in zip, generic
// over the element types; zip is inlined together with the named function
// it is given (add, lt, ...), so each closure compiles to the same tight
// loop as a hand-written one. A function value from opTable (an op without
// a named function here) costs one call per element.

// num is the element type of int and float vector nodes.
type num interface{ int64 | float64 }

// vecsOf returns the vectors of one element type of every node of e.
type vecsOf[T any] func(e *rowEval) [][]T

func intVecs(e *rowEval) [][]int64     { return e.vi }
func floatVecs(e *rowEval) [][]float64 { return e.vf }
func boolVecs(e *rowEval) [][]bool     { return e.vb }

func add[T num](x, y T) T        { return x + y }
func sub[T num](x, y T) T        { return x - y }
func mul[T num](x, y T) T        { return x * y }
func lt[T num](x, y T) bool      { return x < y }
func le[T num](x, y T) bool      { return x <= y }
func gt[T num](x, y T) bool      { return x > y }
func ge[T num](x, y T) bool      { return x >= y }
func eq[T num](x, y T) bool      { return x == y }
func ne[T num](x, y T) bool      { return x != y }
func and(x, y bool) bool         { return x && y }
func or(x, y bool) bool          { return x || y }
func not(x, _ bool) bool         { return !x }
func toFloat(x, _ int64) float64 { return float64(x) }
func toIntF(x, _ float64) int64  { return toInt(x) }

// floorDivPos is floorDiv for a divisor s > 0.
func floorDivPos(x, s int64) int64 {
	q := x / s
	if x < 0 && q*s != x {
		q--
	}
	return q
}

// zip sets r[k] = f(x[k], y) for k < len(r), where y is ys[k] or, when ys
// is nil, s. It is kept within the inliner's budget (cost 80 of 80: any
// addition makes every loop call f per element; check with
// go build -gcflags=-m ./flex).
func zip[T, R any](r []R, x, ys []T, s T, f func(x, y T) R) {
	x = x[:len(r)]
	if ys == nil {
		for k := range r {
			r[k] = f(x[k], s)
		}
	} else {
		for k, y := range ys[:len(r)] {
			r[k] = f(x[k], y)
		}
	}
}

// cmpInto sets r[k] = x[k] o y for a comparison o, where y is the vector ys
// or, when ys is nil, the scalar s.
func cmpInto[T num](o op, r []bool, x, ys []T, s T) {
	switch o {
	case opLt:
		zip(r, x, ys, s, lt[T])
	case opLe:
		zip(r, x, ys, s, le[T])
	case opGt:
		zip(r, x, ys, s, gt[T])
	case opGe:
		zip(r, x, ys, s, ge[T])
	case opEq:
		zip(r, x, ys, s, eq[T])
	default:
		zip(r, x, ys, s, ne[T])
	}
}

// arithInto sets r[k] = x[k] o y for an arithmetic op o whose table
// function is f, with y as in cmpInto: inline loops for +, - and *, f
// called per element otherwise.
func arithInto[T num](o op, f func(x, y T) T, r, x, ys []T, s T) {
	switch o {
	case opAdd:
		zip(r, x, ys, s, add[T])
	case opSub:
		zip(r, x, ys, s, sub[T])
	case opMul:
		zip(r, x, ys, s, mul[T])
	default:
		zip(r, x, ys, s, f)
	}
}

// vecFn returns the closure computing vector node i of p over n positions.
// Scalar operands are read from their broadcast buffers, so every closure is
// a plain loop over equal-length vectors.
func vecFn(p *plan, i int) func(e *rowEval, n int) {
	pn := &p.nodes[i]
	a := pn.args
	switch pn.op {
	case opKV:
		return func(e *rowEval, n int) {
			o := e.vi[i][:n]
			for k := range o {
				o[k] = int64(e.kv0 + k)
			}
		}
	case opScore:
		return func(*rowEval, int) {} // filled by the caller
	case opITensor, opFTensor:
		return tensorFn(pn, i)
	case opToFloat:
		return func(e *rowEval, n int) { zip(e.vf[i][:n], e.vi[a[0]], nil, 0, toFloat) }
	case opToInt:
		return func(e *rowEval, n int) { zip(e.vi[i][:n], e.vf[a[0]], nil, 0, toIntF) }
	case opNot:
		return func(e *rowEval, n int) { zip(e.vb[i][:n], e.vb[a[0]], nil, false, not) }
	case opAnd:
		return func(e *rowEval, n int) { zip(e.vb[i][:n], e.vb[a[0]], e.vb[a[1]], false, and) }
	case opOr:
		return func(e *rowEval, n int) { zip(e.vb[i][:n], e.vb[a[0]], e.vb[a[1]], false, or) }
	case opSelect:
		switch pn.kind {
		case kInt:
			return selectFn(intVecs, i, a)
		case kFloat:
			return selectFn(floatVecs, i, a)
		}
		return selectFn(boolVecs, i, a)
	case opLt, opLe, opGt, opGe, opEq, opNe:
		o, x, y := pn.op, a[0], a[1]
		if p.nodes[x].kind == kFloat {
			return func(e *rowEval, n int) { cmpInto(o, e.vb[i][:n], e.vf[x], e.vf[y], 0) }
		}
		return func(e *rowEval, n int) { cmpInto(o, e.vb[i][:n], e.vi[x], e.vi[y], 0) }
	}
	if pn.kind == kFloat {
		return arithFn(floatVecs, pn.op, opTable[pn.op].f, i, a)
	}
	return arithFn(intVecs, pn.op, opTable[pn.op].i, i, a)
}

// selectFn returns the closure of select(c, x, y) on vectors of T.
func selectFn[T any](vecs vecsOf[T], i int, a []int) func(e *rowEval, n int) {
	return func(e *rowEval, n int) {
		v := vecs(e)
		c, x, y, o := e.vb[a[0]][:n], v[a[1]][:n], v[a[2]][:n], v[i][:n]
		for k := range o {
			if c[k] {
				o[k] = x[k]
			} else {
				o[k] = y[k]
			}
		}
	}
}

// arithFn returns the closure of an arithmetic node on vectors of T; f is
// the op's table function (a unary op ignores its second operand).
func arithFn[T num](vecs vecsOf[T], o op, f func(x, y T) T, i int, a []int) func(e *rowEval, n int) {
	if len(a) == 1 {
		return func(e *rowEval, n int) {
			v := vecs(e)
			zip(v[i][:n], v[a[0]], nil, 0, f)
		}
	}
	x, y := a[0], a[1]
	return func(e *rowEval, n int) {
		v := vecs(e)
		arithInto(o, f, v[i][:n], v[x], v[y], 0)
	}
}

func tensorFn(pn *pnode, i int) func(e *rowEval, n int) {
	a := pn.args
	isInt := pn.op == opITensor
	if len(a) == 1 {
		return func(e *rowEval, n int) {
			t := e.f.tensors[pn.param]
			if e.f.check != nil {
				for k := 0; k < n; k++ {
					e.f.check.at(t, e.vi, a, k)
				}
			}
			x := e.vi[a[0]][:n]
			d0 := t.shape[0]
			if isInt {
				o := e.vi[i][:n]
				for k := range o {
					o[k] = int64(t.idata[clampIndex(x[k], d0)])
				}
			} else {
				o := e.vf[i][:n]
				for k := range o {
					o[k] = t.fdata[clampIndex(x[k], d0)]
				}
			}
		}
	}
	return func(e *rowEval, n int) {
		t := e.f.tensors[pn.param]
		for k := 0; k < n; k++ {
			if e.f.check != nil {
				e.f.check.at(t, e.vi, a, k)
			}
			off := t.offsetAt(e.vi, a, k)
			if isInt {
				e.vi[i][k] = int64(t.idata[off])
			} else {
				e.vf[i][k] = t.fdata[off]
			}
		}
	}
}

// swapped gives, for a comparison, the op with its operands exchanged
// (x < y is y > x).
var swapped = map[op]op{opLt: opGt, opLe: opGe, opGt: opLt, opGe: opLe, opEq: opEq, opNe: opNe}

// vecScalarFn returns a closure for an int comparison or binary arithmetic
// node with one operand a vector and the other a scalar, which it reads
// straight from its scalar slot (no broadcast buffer), or nil for any
// other node.
func vecScalarFn(p *plan, i int) func(e *rowEval, n int) {
	pn := &p.nodes[i]
	if len(pn.args) != 2 || p.nodes[pn.args[0]].kind != kInt {
		return nil
	}
	cls := opTable[pn.op].class
	if cls != clsCmp && cls != clsArith {
		return nil
	}
	x, y := pn.args[0], pn.args[1]
	o := pn.op
	if p.nodes[x].level < 2 && p.nodes[y].level == 2 { // scalar op vector
		switch {
		case cls == clsCmp:
			o = swapped[o]
		case !opTable[o].comm:
			return nil
		}
		x, y = y, x
	}
	if p.nodes[x].level != 2 || p.nodes[y].level == 2 {
		return nil
	}
	if cls == clsCmp {
		return func(e *rowEval, n int) { cmpInto(o, e.vb[i][:n], e.vi[x], nil, e.si[y]) }
	}
	f := opTable[o].i
	return func(e *rowEval, n int) {
		r, s := e.vi[i][:n], e.si[y]
		if o == opDiv && s > 0 {
			zip(r, e.vi[x], nil, s, floorDivPos)
			return
		}
		arithInto(o, f, r, e.vi[x], nil, s)
	}
}
