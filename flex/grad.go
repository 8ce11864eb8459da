package flex

// gradEval differentiates a score program over a row in reverse mode: given
// the raw scores s and the upstream gradient g of the program's result, it
// gives ds = g · ∂score/∂s and adds g · ∂score/∂t to the gradient of every
// float tensor t the program reads.
type gradEval struct {
	*rowEval
	va [][]float64   // vector adjoints (vector float nodes and broadcast scalars)
	sa []float64     // scalar adjoints
	tg []*tensorGrad // tensor gradients by parameter index (nil for others)
}

func (rp *rowProg) newGradEval(f *frame) *gradEval {
	ge := &gradEval{rowEval: rp.newEval(f), va: make([][]float64, len(rp.p.nodes)),
		sa: make([]float64, len(rp.p.nodes)), tg: make([]*tensorGrad, len(rp.p.params))}
	for i := range rp.p.nodes {
		if rp.p.nodes[i].grad && (rp.p.nodes[i].level == 2 || ge.vf[i] != nil) {
			ge.va[i] = make([]float64, rp.maxN)
		}
	}
	for i, prm := range rp.p.params {
		if prm.Kind == ParamFloatTensor {
			ge.tg[i] = newTensorGrad(len(f.tensors[i].fdata))
		}
	}
	return ge
}

// scoreGrad sets ds[k] for kv0+k given raw scores s and upstream g (after
// setBH and setRow); elements with g[k] == 0 contribute nothing.
func (ge *gradEval) scoreGrad(kv0 int, s, g, ds []float64) {
	rp, p := ge.rp, ge.rp.p
	n := len(s)
	if rp.scoreAt >= 0 {
		copy(ge.vf[rp.scoreAt][:n], s)
	}
	ge.run(kv0, n)
	for i := range p.nodes {
		if ge.va[i] != nil {
			clear(ge.va[i][:n])
		}
		ge.sa[i] = 0
	}
	r := p.root
	if !p.nodes[r].grad { // the result depends on neither score nor a float tensor
		clear(ds)
		return
	}
	if p.nodes[r].level == 2 {
		copy(ge.va[r][:n], g)
	} else {
		for _, x := range g {
			ge.sa[r] += x
		}
	}
	for vi := len(rp.vec) - 1; vi >= 0; vi-- {
		i := rp.vec[vi]
		pn := &p.nodes[i]
		if !pn.grad || pn.kind != kFloat || pn.op == opScore {
			continue
		}
		adj := ge.va[i][:n]
		a := pn.args
		switch pn.op {
		case opFTensor:
			t := ge.f.tensors[pn.param]
			tg := ge.tg[pn.param]
			for k, x := range adj {
				if x == 0 || g[k] == 0 {
					continue
				}
				tg.add(t.offsetAt(ge.vi, a, k), x)
			}
		case opSelect:
			c := ge.vb[a[0]][:n]
			for k, x := range adj {
				br := a[2]
				if c[k] {
					br = a[1]
				}
				if ge.va[br] != nil {
					ge.va[br][k] += x
				}
			}
		default:
			out := ge.vf[i][:n]
			xs := ge.vf[a[0]][:n]
			var ys []float64
			if len(a) > 1 {
				ys = ge.vf[a[1]][:n]
			}
			for k, x := range adj {
				if g[k] == 0 {
					continue
				}
				y := 0.0
				if ys != nil {
					y = ys[k]
				}
				dx, dy := opTable[pn.op].df(xs[k], y, out[k])
				if ge.va[a[0]] != nil {
					ge.va[a[0]][k] += x * dx
				}
				if len(a) > 1 && ge.va[a[1]] != nil {
					ge.va[a[1]][k] += x * dy
				}
			}
		}
	}
	for _, i := range rp.bcast {
		if ge.va[i] != nil {
			for k, x := range ge.va[i][:n] {
				if g[k] != 0 {
					ge.sa[i] += x
				}
			}
		}
	}
	ge.scalarGrad(rp.lvl1)
	ge.scalarGrad(rp.lvl0)
	if rp.scoreAt >= 0 {
		for k, x := range ge.va[rp.scoreAt][:n] {
			if g[k] == 0 {
				x = 0
			}
			ds[k] = x
		}
	} else {
		clear(ds)
	}
}

// scalarGrad propagates scalar adjoints through nodes (reverse order).
func (ge *gradEval) scalarGrad(nodes []int) {
	p := ge.rp.p
	for ni := len(nodes) - 1; ni >= 0; ni-- {
		i := nodes[ni]
		pn := &p.nodes[i]
		x := ge.sa[i]
		if !pn.grad || pn.kind != kFloat || x == 0 {
			continue
		}
		a := pn.args
		switch pn.op {
		case opFTensor:
			ge.tg[pn.param].add(ge.f.tensors[pn.param].offset(ge.si, a), x)
		case opSelect:
			if ge.si[a[0]] != 0 {
				ge.sa[a[1]] += x
			} else {
				ge.sa[a[2]] += x
			}
		default:
			y := 0.0
			if len(a) > 1 {
				y = ge.sf[a[1]]
			}
			dx, dy := opTable[pn.op].df(ge.sf[a[0]], y, ge.sf[i])
			ge.sa[a[0]] += x * dx
			if len(a) > 1 {
				ge.sa[a[1]] += x * dy
			}
		}
	}
}
