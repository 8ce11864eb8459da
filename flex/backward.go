package flex

import "math"

// bwdScratch is one worker's buffers for the backward pass.
type bwdScratch[T elem] struct {
	s, dp       []T // m x n: scores then P; dO·vᵀ then dS
	pt, dst     []T // n x m transposes of P and dS
	qt, dot, kt []T // transposes of the q tile, the dO tile and the k block
	dq, dk, dv  []T // local gradient accumulators
	raw, g, ds  []float64
	tm          *tileMask
	mev         *rowEval
	gev         *gradEval
}

// Backward returns the gradients of a loss L with respect to q, k, v (and
// to the float tensors the score program reads) given dout = ∂L/∂out and
// the out and lse of Forward. With P_ij = exp(s_ij - lse_i) and the raw
// score r_ij = scale · q_i·k_j (s_ij = score(r_ij)):
//
//	dv_j  = Σ_i P_ij dout_i
//	dP_ij = dout_i · v_j,  D_i = dout_i · out_i
//	dS_ij = P_ij (dP_ij - D_i) · ∂score/∂r (r_ij)
//	dq_i  = scale Σ_j dS_ij k_j,  dk_j = scale Σ_i dS_ij q_i
//	dt    = Σ_ij P_ij (dP_ij - D_i) · ∂score/∂t   for each float tensor t
//
// Rows with lse -Inf contribute nothing (no NaN). Work is parallel over
// (batch, kv head, kv block) using the transposed lists of bm; the kv
// heads' gradients sum over their query heads without copying. The result
// is deterministic: the sums across tasks (dq and the tensor gradients)
// are taken in a fixed order, so repeated calls give bit-identical
// gradients whatever GOMAXPROCS and the scheduling.
func Backward[T float32 | float64](d Dims, q, k, v, out, lse, dout []T, bm *BlockMask, score *ScoreProgram, args *Args, scale float64) Grads[T] {
	checkDims(d, bm)
	return backward(d, q, k, v, out, lse, dout, sparseSource(d, bm), score, args, scale)
}

// DenseBackward is the dense reference of Backward, computing every pair.
func DenseBackward[T float32 | float64](d Dims, q, k, v, out, lse, dout []T, dm *DenseMask, score *ScoreProgram, args *Args, scale float64) Grads[T] {
	checkDense(d, dm)
	return backward(d, q, k, v, out, lse, dout, denseSource(d, dm), score, args, scale)
}

func backward[T elem](d Dims, q, k, v, out, lse, dout []T, src *blockSource, score *ScoreProgram, args *Args, scale float64) Grads[T] {
	D := d.HeadDim
	nRows := d.Batch * d.HeadsQ * d.LenQ
	checkLen("q", len(q), nRows*D)
	checkLen("out", len(out), nRows*D)
	checkLen("dout", len(dout), nRows*D)
	checkLen("lse", len(lse), nRows)
	checkLen("k", len(k), d.Batch*d.HeadsKV*d.LenKV*D)
	checkLen("v", len(v), d.Batch*d.HeadsKV*d.LenKV*D)
	bq, bkv, nq, nkv := src.bq, src.bkv, src.nq, src.nkv
	group := d.Group()

	// D_i = dout_i · out_i.
	delta := make([]float64, nRows)
	tiles := d.Batch * d.HeadsQ * nq
	parallelFor(tiles, workerCount(tiles), func(_, t int) {
		bh, qb := t/nq, t%nq
		q0 := qb * bq
		m := min(bq, d.LenQ-q0)
		row0 := bh*d.LenQ + q0
		for r := row0; r < row0+m; r++ {
			s := 0.0
			o, g := out[r*D:(r+1)*D], dout[r*D:(r+1)*D]
			for x := range o {
				s += float64(o[x]) * float64(g[x])
			}
			delta[r] = s
		}
	})

	gr := Grads[T]{DQ: make([]T, len(q)), DK: make([]T, len(k)), DV: make([]T, len(v))}
	sp, sf := bindScore(score, args, bkv)
	shared := src.sharedHeads()
	// Task t = (b*HeadsKV + hk)*nkv + kvb.
	split := func(t int) (b, hk, kvb int) { return t / (d.HeadsKV * nkv), t / nkv % d.HeadsKV, t % nkv }
	tasks := taskOrder(d.Batch*d.HeadsKV*nkv, func(t int) int {
		b, hk, kvb := split(t)
		if src.dense != nil {
			return group * nq
		}
		c := 0
		for h := hk * group; h < (hk+1)*group; h++ {
			part, full := src.sparse.QBlocks(b, h, kvb)
			c += len(part) + len(full)
		}
		return c
	})
	// The q tiles each task adds into, in the order pair visits them; dq
	// sums them per tile in task-position order (see orderedSum).
	tilesOf := func(ti int, fn func(tile int)) {
		b, hk, kvb := split(tasks[ti])
		h0, h1 := hk*group, (hk+1)*group
		if shared {
			src.colBlocks(b, h0, kvb, func(qb int, _ blockKind) {
				for h := h0; h < h1; h++ {
					fn((b*d.HeadsQ+h)*nq + qb)
				}
			})
			return
		}
		for h := h0; h < h1; h++ {
			src.colBlocks(b, h, kvb, func(qb int, _ blockKind) { fn((b*d.HeadsQ+h)*nq + qb) })
		}
	}
	dqSum := newOrderedSum(gr.DQ, tiles, bq*D, func(tile int) (int, int) {
		q0 := tile % nq * bq
		return (tile/nq*d.LenQ + q0) * D, min(bq, d.LenQ-q0) * D
	}, len(tasks), tilesOf)
	var taskGrads [][]sparseGrad // per task position, per score parameter
	if sp != nil {
		taskGrads = make([][]sparseGrad, len(tasks))
	}
	workers := workerCount(len(tasks))
	scratch := make([]*bwdScratch[T], workers)
	parallelFor(len(tasks), workers, func(w, ti int) {
		sc := scratch[w]
		if sc == nil {
			sc = &bwdScratch[T]{s: make([]T, bq*bkv), dp: make([]T, bq*bkv),
				dq: make([]T, bq*D), dk: make([]T, bkv*D), dv: make([]T, bkv*D),
				raw: make([]float64, bkv), g: make([]float64, bkv), ds: make([]float64, bkv),
				tm: newTileMask(bq, bkv)}
			if src.maskProg != nil {
				sc.mev = src.maskProg.newEval(src.maskArgs)
			}
			if sp != nil {
				sc.gev = sp.newGradEval(sf)
			}
			scratch[w] = sc
		}
		b, hk, kvb := split(tasks[ti])
		k0 := kvb * bkv
		n := min(bkv, d.LenKV-k0)
		kvRow := (b*d.HeadsKV+hk)*d.LenKV + k0
		kb, vb := k[kvRow*D:(kvRow+n)*D], v[kvRow*D:(kvRow+n)*D]
		clear(sc.dk[:n*D])
		clear(sc.dv[:n*D])
		// pair accumulates the contributions of q tile qb of head h, whose
		// mask (for partial and dense blocks) is in sc.tm.
		pair := func(h, qb int, kind blockKind, groups, cols []span) {
			q0 := qb * bq
			m := min(bq, d.LenQ-q0)
			row0 := (b*d.HeadsQ+h)*d.LenQ + q0
			tile := (b*d.HeadsQ+h)*nq + qb
			qt, dot := q[row0*D:(row0+m)*D], dout[row0*D:(row0+m)*D]
			gemmNT(sc.s, bkv, qt, D, kb, D, m, n, D, groups, nil, T(scale), false)
			gemmNT(sc.dp, bkv, dot, D, vb, D, m, n, D, groups, nil, 1, false)
			if sc.gev != nil {
				sc.gev.setBH(b, h)
			}
			for i := 0; i < m; i++ {
				js, je := 0, n
				if groups != nil {
					js, je = int(groups[i/rowGroup].lo), int(groups[i/rowGroup].hi)
				}
				srow, dsrow := sc.s[i*bkv:i*bkv+n], sc.dp[i*bkv:i*bkv+n]
				l := float64(lse[row0+i])
				if js >= je || math.IsInf(l, -1) {
					clear(srow)
					clear(dsrow)
					continue
				}
				clear(srow[:js])
				clear(srow[je:])
				clear(dsrow[:js])
				clear(dsrow[je:])
				srow, dsrow = srow[js:je], dsrow[js:je]
				var ok []bool
				if kind != kindFull {
					ok = sc.tm.ok[i*n+js : i*n+je]
				}
				if sc.gev == nil {
					probGrad(srow, dsrow, ok, l, delta[row0+i])
					continue
				}
				scoreRowGrad(sc, q0+i, k0+js, srow, dsrow, ok, l, delta[row0+i])
			}
			// dv += Pᵀ·dout, dk += scale·dSᵀ·q, dq = scale·dS·k: P and dS are
			// read transposed in place (row stride 1, inner stride bkv).
			gemmAcc(sc.dv, D, sc.s, 1, bkv, dot, D, n, D, m, cols, 1)
			gemmAcc(sc.dk, D, sc.dp, 1, bkv, qt, D, n, D, m, cols, T(scale))
			clear(sc.dq[:m*D])
			gemmAcc(sc.dq, D, sc.dp, bkv, 1, kb, D, m, D, n, groups, T(scale))
			sc.dq = dqSum.add(tile, ti, sc.dq)
		}
		// visit evaluates the mask of (qb, kv block) for head ha once and
		// runs pair for heads [ha, hb).
		visit := func(ha, hb, qb int, kind blockKind) {
			q0 := qb * bq
			m := min(bq, d.LenQ-q0)
			var groups, cols []span
			switch kind {
			case kindPartial:
				sc.mev.setBH(b, ha)
				if !sc.tm.evalProgram(sc.mev, q0, m, k0, n) {
					for h := ha; h < hb; h++ {
						dqSum.add((b*d.HeadsQ+h)*nq+qb, ti, nil)
					}
					return
				}
				groups, cols = sc.tm.groups, sc.tm.cols
			case kindDense:
				src.dense.tile(sc.tm, b, ha, q0, m, k0, n)
			}
			for h := ha; h < hb; h++ {
				pair(h, qb, kind, groups, cols)
			}
		}
		h0, h1 := hk*group, (hk+1)*group
		if shared {
			src.colBlocks(b, h0, kvb, func(qb int, kind blockKind) { visit(h0, h1, qb, kind) })
		} else {
			for h := h0; h < h1; h++ {
				src.colBlocks(b, h, kvb, func(qb int, kind blockKind) { visit(h, h+1, qb, kind) })
			}
		}
		copy(gr.DK[kvRow*D:(kvRow+n)*D], sc.dk[:n*D])
		copy(gr.DV[kvRow*D:(kvRow+n)*D], sc.dv[:n*D])
		if taskGrads != nil {
			tg := make([]sparseGrad, len(sc.gev.tg))
			for i, g := range sc.gev.tg {
				if g != nil {
					tg[i] = g.take()
				}
			}
			taskGrads[ti] = tg
		}
	})
	if sp != nil {
		gr.Tensors = map[string][]T{}
		for i, prm := range score.plan.params {
			if prm.Kind != ParamFloatTensor {
				continue
			}
			// Summed in task-position order, like dq.
			sum := make([]float64, len(sf.tensors[i].fdata))
			for _, tg := range taskGrads {
				for x, off := range tg[i].idx {
					sum[off] += tg[i].val[x]
				}
			}
			g := make([]T, len(sum))
			for x, y := range sum {
				g[x] = T(y)
			}
			gr.Tensors[prm.Name] = g
		}
	}
	mustCheck(sf)
	return gr
}

// probGrad turns a row of raw scores s into P = exp(s - lse) and the row
// of dP = dout·vᵀ into dS = P (dP - D_i), zero where ok (if given) is false.
func probGrad[T elem](s, dp []T, ok []bool, lse, di float64) {
	switch sv := any(s).(type) {
	case []float32:
		dv := any(dp).([]float32)
		l, d := float32(lse), float32(di)
		if hasAVX2FMA {
			expShift32(sv, l)
			for j, p := range sv {
				if ok != nil && !ok[j] {
					sv[j], dv[j] = 0, 0
					continue
				}
				dv[j] = p * (dv[j] - d)
			}
			return
		}
		for j, x := range sv {
			if ok != nil && !ok[j] {
				sv[j], dv[j] = 0, 0
				continue
			}
			p := exp32(x - l)
			sv[j] = p
			dv[j] = p * (dv[j] - d)
		}
	case []float64:
		dv := any(dp).([]float64)
		for j, x := range sv {
			if ok != nil && !ok[j] {
				sv[j], dv[j] = 0, 0
				continue
			}
			p := math.Exp(x - lse)
			sv[j] = p
			dv[j] = p * (dv[j] - di)
		}
	}
}

// scoreRowGrad is probGrad through a score program: P = exp(score(s) -
// lse) and dS = P (dP - D_i) · ∂score/∂s, accumulating the gradients of
// the program's float tensors.
func scoreRowGrad[T elem](sc *bwdScratch[T], q, kv0 int, srow, dsrow []T, ok []bool, l, di float64) {
	n := len(srow)
	raw, g, ds := sc.raw[:n], sc.g[:n], sc.ds[:n]
	for j, x := range srow {
		raw[j] = float64(x)
		g[j] = float64(x)
	}
	sc.gev.setRow(q)
	sc.gev.scoreRow(kv0, g) // g = score(raw)
	for j := range srow {
		if ok != nil && !ok[j] {
			srow[j], g[j] = 0, 0
			continue
		}
		p := math.Exp(g[j] - l)
		srow[j] = T(p)
		g[j] = p * (float64(dsrow[j]) - di)
	}
	sc.gev.scoreGrad(kv0, raw, g, ds)
	for j := range dsrow {
		dsrow[j] = T(ds[j])
	}
}
