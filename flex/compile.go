package flex

import "fmt"

// rowProg is a plan compiled for row evaluation: the program is evaluated for
// one (b, h, q) and a run of consecutive kv positions at once. Nodes that do
// not depend on kv (level 0: b and h only; level 1: also q) are evaluated once
// per head or row as scalars; kv-dependent nodes (level 2) run as closures
// over vectors, so the per-element cost is a few tight loops, not a tree walk.
type rowProg struct {
	p       *plan
	lvl0    []int // scalar nodes evaluated per (b, h)
	lvl1    []int // scalar nodes evaluated per row
	vec     []int // vector nodes, topological order
	vecFns  []func(e *rowEval, n int)
	bcast   []int // scalar nodes used by vector nodes: broadcast per row
	maxN    int
	scoreAt int // node index of Score, or -1
}

// compileRows compiles p for rows of at most maxN kv positions.
func compileRows(p *plan, maxN int) *rowProg {
	rp := &rowProg{p: p, maxN: maxN, scoreAt: -1}
	isB := make([]bool, len(p.nodes))
	for i := range p.nodes {
		pn := &p.nodes[i]
		switch pn.level {
		case 0:
			rp.lvl0 = append(rp.lvl0, i)
		case 1:
			rp.lvl1 = append(rp.lvl1, i)
		default:
			rp.vec = append(rp.vec, i)
			if pn.op == opScore {
				rp.scoreAt = i
			}
			if fn := vecScalarFn(p, i); fn != nil {
				rp.vecFns = append(rp.vecFns, fn) // reads its scalar operand directly
				continue
			}
			rp.vecFns = append(rp.vecFns, vecFn(p, i))
			for _, a := range pn.args {
				if p.nodes[a].level < 2 && !isB[a] {
					isB[a] = true
					rp.bcast = append(rp.bcast, a)
				}
			}
		}
	}
	return rp
}

// rowEval evaluates a rowProg; it holds the scratch buffers of one goroutine.
type rowEval struct {
	rp  *rowProg
	f   *frame
	b   int
	h   int
	q   int
	kv0 int
	si  []int64   // scalar int and bool (0/1) values by node
	sf  []float64 // scalar float values by node
	vi  [][]int64
	vf  [][]float64
	vb  [][]bool
}

func (rp *rowProg) newEval(f *frame) *rowEval {
	n := len(rp.p.nodes)
	e := &rowEval{rp: rp, f: f, si: make([]int64, n), sf: make([]float64, n),
		vi: make([][]int64, n), vf: make([][]float64, n), vb: make([][]bool, n)}
	alloc := func(i int) {
		switch rp.p.nodes[i].kind {
		case kInt:
			e.vi[i] = make([]int64, rp.maxN)
		case kFloat:
			e.vf[i] = make([]float64, rp.maxN)
		default:
			e.vb[i] = make([]bool, rp.maxN)
		}
	}
	for _, i := range rp.vec {
		alloc(i)
	}
	for _, i := range rp.bcast {
		alloc(i)
	}
	return e
}

// setBH evaluates the nodes that depend on b and h only.
func (e *rowEval) setBH(b, h int) {
	e.b, e.h = b, h
	for _, i := range e.rp.lvl0 {
		e.scalar(i)
	}
}

// setRow evaluates the nodes that depend on q (after setBH).
func (e *rowEval) setRow(q int) {
	e.q = q
	for _, i := range e.rp.lvl1 {
		e.scalar(i)
	}
}

// run evaluates the vector nodes for kv in [kv0, kv0+n).
func (e *rowEval) run(kv0, n int) {
	if n > e.rp.maxN {
		panic(fmt.Sprintf("flex: row of %d positions exceeds the compiled width %d", n, e.rp.maxN))
	}
	e.kv0 = kv0
	p := e.rp.p
	for _, i := range e.rp.bcast {
		switch p.nodes[i].kind {
		case kInt:
			v, o := e.si[i], e.vi[i][:n]
			for k := range o {
				o[k] = v
			}
		case kFloat:
			v, o := e.sf[i], e.vf[i][:n]
			for k := range o {
				o[k] = v
			}
		default:
			v, o := e.si[i] != 0, e.vb[i][:n]
			for k := range o {
				o[k] = v
			}
		}
	}
	for _, fn := range e.rp.vecFns {
		fn(e, n)
	}
}

// mask evaluates a mask program for kv in [kv0, kv0+n) into out[:n].
func (e *rowEval) mask(kv0, n int, out []bool) {
	r := e.rp.p.root
	if e.rp.p.nodes[r].level < 2 {
		v := e.si[r] != 0
		o := out[:n]
		for k := range o {
			o[k] = v
		}
		return
	}
	e.run(kv0, n)
	copy(out[:n], e.vb[r][:n])
}

// scoreRow applies a score program in place to s, the scores of kv in
// [kv0, kv0+len(s)).
func (e *rowEval) scoreRow(kv0 int, s []float64) {
	n := len(s)
	if e.rp.scoreAt >= 0 {
		copy(e.vf[e.rp.scoreAt][:n], s)
	}
	r := e.rp.p.root
	if e.rp.p.nodes[r].level < 2 {
		v := e.sf[r]
		for k := range s {
			s[k] = v
		}
		return
	}
	e.run(kv0, n)
	copy(s, e.vf[r][:n])
}

// scalar evaluates node i from the scalar values of its arguments.
func (e *rowEval) scalar(i int) {
	pn := &e.rp.p.nodes[i]
	a := pn.args
	switch pn.op {
	case opB:
		e.si[i] = int64(e.b)
	case opH:
		e.si[i] = int64(e.h)
	case opQ:
		e.si[i] = int64(e.q)
	case opConst:
		e.si[i] = pn.ival
	case opFConst:
		e.sf[i] = pn.fval
	case opIScalar:
		e.si[i] = e.f.ints[pn.param]
	case opFScalar:
		e.sf[i] = e.f.floats[pn.param]
	case opITensor, opFTensor:
		t := e.f.tensors[pn.param]
		off := t.offset(e.si, a)
		if e.f.check != nil {
			e.f.check.scalar(t, e.si, a)
		}
		if pn.op == opITensor {
			e.si[i] = int64(t.idata[off])
		} else {
			e.sf[i] = t.fdata[off]
		}
	case opToFloat:
		e.sf[i] = float64(e.si[a[0]])
	case opSelect:
		c := e.si[a[0]] != 0
		if pn.kind == kFloat {
			e.sf[i] = e.sf[a[2]]
			if c {
				e.sf[i] = e.sf[a[1]]
			}
		} else {
			e.si[i] = e.si[a[2]]
			if c {
				e.si[i] = e.si[a[1]]
			}
		}
	case opAnd:
		e.si[i] = b2i(e.si[a[0]] != 0 && e.si[a[1]] != 0)
	case opOr:
		e.si[i] = b2i(e.si[a[0]] != 0 || e.si[a[1]] != 0)
	case opNot:
		e.si[i] = b2i(e.si[a[0]] == 0)
	case opLt, opLe, opGt, opGe, opEq, opNe:
		if e.rp.p.nodes[a[0]].kind == kFloat {
			e.si[i] = b2i(compare(pn.op, e.sf[a[0]], e.sf[a[1]]))
		} else {
			e.si[i] = b2i(compare(pn.op, e.si[a[0]], e.si[a[1]]))
		}
	case opToInt:
		e.si[i] = toInt(e.sf[a[0]])
	default:
		info := &opTable[pn.op]
		if pn.kind == kFloat {
			y := 0.0
			if len(a) > 1 {
				y = e.sf[a[1]]
			}
			e.sf[i] = info.f(e.sf[a[0]], y)
		} else {
			var y int64
			if len(a) > 1 {
				y = e.si[a[1]]
			}
			e.si[i] = info.i(e.si[a[0]], y)
		}
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// compare returns x o y for a comparison op o.
func compare[T int64 | float64](o op, x, y T) bool {
	switch o {
	case opLt:
		return x < y
	case opLe:
		return x <= y
	case opGt:
		return x > y
	case opGe:
		return x >= y
	case opEq:
		return x == y
	}
	return x != y
}
