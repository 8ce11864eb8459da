package flex

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
		return func(e *rowEval, n int) {
			x, o := e.vi[a[0]][:n], e.vf[i][:n]
			for k := range o {
				o[k] = float64(x[k])
			}
		}
	case opToInt:
		return func(e *rowEval, n int) {
			x, o := e.vf[a[0]][:n], e.vi[i][:n]
			for k := range o {
				o[k] = toInt(x[k])
			}
		}
	case opSelect:
		switch pn.kind {
		case kInt:
			return func(e *rowEval, n int) {
				c, x, y, o := e.vb[a[0]][:n], e.vi[a[1]][:n], e.vi[a[2]][:n], e.vi[i][:n]
				for k := range o {
					if c[k] {
						o[k] = x[k]
					} else {
						o[k] = y[k]
					}
				}
			}
		case kFloat:
			return func(e *rowEval, n int) {
				c, x, y, o := e.vb[a[0]][:n], e.vf[a[1]][:n], e.vf[a[2]][:n], e.vf[i][:n]
				for k := range o {
					if c[k] {
						o[k] = x[k]
					} else {
						o[k] = y[k]
					}
				}
			}
		}
		return func(e *rowEval, n int) {
			c, x, y, o := e.vb[a[0]][:n], e.vb[a[1]][:n], e.vb[a[2]][:n], e.vb[i][:n]
			for k := range o {
				if c[k] {
					o[k] = x[k]
				} else {
					o[k] = y[k]
				}
			}
		}
	case opAnd:
		return func(e *rowEval, n int) {
			x, y, o := e.vb[a[0]][:n], e.vb[a[1]][:n], e.vb[i][:n]
			for k := range o {
				o[k] = x[k] && y[k]
			}
		}
	case opOr:
		return func(e *rowEval, n int) {
			x, y, o := e.vb[a[0]][:n], e.vb[a[1]][:n], e.vb[i][:n]
			for k := range o {
				o[k] = x[k] || y[k]
			}
		}
	case opNot:
		return func(e *rowEval, n int) {
			x, o := e.vb[a[0]][:n], e.vb[i][:n]
			for k := range o {
				o[k] = !x[k]
			}
		}
	case opLt, opLe, opGt, opGe, opEq, opNe:
		if p.nodes[a[0]].kind == kFloat {
			return cmpFFn(pn.op, i, a[0], a[1])
		}
		return cmpIFn(pn.op, i, a[0], a[1])
	}
	if pn.kind == kFloat {
		return arithFFn(pn.op, i, a)
	}
	return arithIFn(pn.op, i, a)
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

func cmpIFn(o op, i, xa, ya int) func(e *rowEval, n int) {
	return func(e *rowEval, n int) {
		x, y, r := e.vi[xa][:n], e.vi[ya][:n], e.vb[i][:n]
		switch o {
		case opLt:
			for k := range r {
				r[k] = x[k] < y[k]
			}
		case opLe:
			for k := range r {
				r[k] = x[k] <= y[k]
			}
		case opGt:
			for k := range r {
				r[k] = x[k] > y[k]
			}
		case opGe:
			for k := range r {
				r[k] = x[k] >= y[k]
			}
		case opEq:
			for k := range r {
				r[k] = x[k] == y[k]
			}
		default:
			for k := range r {
				r[k] = x[k] != y[k]
			}
		}
	}
}

func cmpFFn(o op, i, xa, ya int) func(e *rowEval, n int) {
	return func(e *rowEval, n int) {
		x, y, r := e.vf[xa][:n], e.vf[ya][:n], e.vb[i][:n]
		for k := range r {
			r[k] = compare(o, x[k], y[k])
		}
	}
}

// arithIFn returns the loop of an int arithmetic op: inline for the
// common ones, through the op table's function otherwise.
func arithIFn(o op, i int, a []int) func(e *rowEval, n int) {
	f := opTable[o].i
	if len(a) == 1 {
		return func(e *rowEval, n int) {
			x, r := e.vi[a[0]][:n], e.vi[i][:n]
			for k := range r {
				r[k] = f(x[k], 0)
			}
		}
	}
	xa, ya := a[0], a[1]
	switch o {
	case opAdd:
		return func(e *rowEval, n int) {
			x, y, r := e.vi[xa][:n], e.vi[ya][:n], e.vi[i][:n]
			for k := range r {
				r[k] = x[k] + y[k]
			}
		}
	case opSub:
		return func(e *rowEval, n int) {
			x, y, r := e.vi[xa][:n], e.vi[ya][:n], e.vi[i][:n]
			for k := range r {
				r[k] = x[k] - y[k]
			}
		}
	}
	return func(e *rowEval, n int) {
		x, y, r := e.vi[xa][:n], e.vi[ya][:n], e.vi[i][:n]
		for k := range r {
			r[k] = f(x[k], y[k])
		}
	}
}

// arithFFn is arithIFn for float ops.
func arithFFn(o op, i int, a []int) func(e *rowEval, n int) {
	f := opTable[o].f
	if len(a) == 1 {
		return func(e *rowEval, n int) {
			x, r := e.vf[a[0]][:n], e.vf[i][:n]
			for k := range r {
				r[k] = f(x[k], 0)
			}
		}
	}
	xa, ya := a[0], a[1]
	switch o {
	case opAdd:
		return func(e *rowEval, n int) {
			x, y, r := e.vf[xa][:n], e.vf[ya][:n], e.vf[i][:n]
			for k := range r {
				r[k] = x[k] + y[k]
			}
		}
	case opMul:
		return func(e *rowEval, n int) {
			x, y, r := e.vf[xa][:n], e.vf[ya][:n], e.vf[i][:n]
			for k := range r {
				r[k] = x[k] * y[k]
			}
		}
	}
	return func(e *rowEval, n int) {
		x, y, r := e.vf[xa][:n], e.vf[ya][:n], e.vf[i][:n]
		for k := range r {
			r[k] = f(x[k], y[k])
		}
	}
}

// vecScalarFn returns a closure for the common vector-op-scalar shapes of
// int comparisons and arithmetic (one operand a vector, the other a scalar
// read straight from its scalar slot, with no broadcast buffer), or nil.
func vecScalarFn(p *plan, i int) func(e *rowEval, n int) {
	pn := &p.nodes[i]
	if len(pn.args) != 2 || p.nodes[pn.args[0]].kind != kInt {
		return nil
	}
	x, y := pn.args[0], pn.args[1]
	o := pn.op
	if p.nodes[x].level < 2 && p.nodes[y].level == 2 { // scalar op vector
		switch o {
		case opLt:
			o = opGt
		case opLe:
			o = opGe
		case opGt:
			o = opLt
		case opGe:
			o = opLe
		default:
			if !opTable[o].comm {
				return nil
			}
		}
		x, y = y, x
	}
	if p.nodes[x].level != 2 || p.nodes[y].level == 2 {
		return nil
	}
	switch o {
	case opLt:
		return func(e *rowEval, n int) {
			v, s, r := e.vi[x][:n], e.si[y], e.vb[i][:n]
			for k := range r {
				r[k] = v[k] < s
			}
		}
	case opLe:
		return func(e *rowEval, n int) {
			v, s, r := e.vi[x][:n], e.si[y], e.vb[i][:n]
			for k := range r {
				r[k] = v[k] <= s
			}
		}
	case opGt:
		return func(e *rowEval, n int) {
			v, s, r := e.vi[x][:n], e.si[y], e.vb[i][:n]
			for k := range r {
				r[k] = v[k] > s
			}
		}
	case opGe:
		return func(e *rowEval, n int) {
			v, s, r := e.vi[x][:n], e.si[y], e.vb[i][:n]
			for k := range r {
				r[k] = v[k] >= s
			}
		}
	case opEq:
		return func(e *rowEval, n int) {
			v, s, r := e.vi[x][:n], e.si[y], e.vb[i][:n]
			for k := range r {
				r[k] = v[k] == s
			}
		}
	case opNe:
		return func(e *rowEval, n int) {
			v, s, r := e.vi[x][:n], e.si[y], e.vb[i][:n]
			for k := range r {
				r[k] = v[k] != s
			}
		}
	case opAdd:
		return func(e *rowEval, n int) {
			v, s, r := e.vi[x][:n], e.si[y], e.vi[i][:n]
			for k := range r {
				r[k] = v[k] + s
			}
		}
	case opSub:
		return func(e *rowEval, n int) {
			v, s, r := e.vi[x][:n], e.si[y], e.vi[i][:n]
			for k := range r {
				r[k] = v[k] - s
			}
		}
	case opMul:
		return func(e *rowEval, n int) {
			v, s, r := e.vi[x][:n], e.si[y], e.vi[i][:n]
			for k := range r {
				r[k] = v[k] * s
			}
		}
	case opDiv:
		return func(e *rowEval, n int) {
			v, s, r := e.vi[x][:n], e.si[y], e.vi[i][:n]
			if s <= 0 {
				for k := range r {
					r[k] = floorDiv(v[k], s)
				}
				return
			}
			for k := range r {
				q := v[k] / s
				if v[k] < 0 && q*s != v[k] {
					q--
				}
				r[k] = q
			}
		}
	}
	return nil
}
