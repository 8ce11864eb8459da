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
// the out and lse of Forward (out and dout laid out as d.OutHeadsInner
// says). With P_ij = exp(s_ij - lse_i) and the raw score r_ij = scale ·
// q_i·k_j (s_ij = score(r_ij)):
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
// gradients whatever GOMAXPROCS and the scheduling. It panics like Forward.
func Backward[T float32 | float64](d Dims, q, k, v, out, lse, dout []T, bm *BlockMask, score *ScoreProgram, args *Args, scale float64) Grads[T] {
	checkDims(d, bm)
	return backward(d, q, k, v, out, lse, dout, sparseSource(d, bm), score, args, scale)
}

// DenseBackward is the dense reference of Backward, computing every pair.
func DenseBackward[T float32 | float64](d Dims, q, k, v, out, lse, dout []T, dm *DenseMask, score *ScoreProgram, args *Args, scale float64) Grads[T] {
	checkDense(d, dm)
	return backward(d, q, k, v, out, lse, dout, denseSource(d, dm), score, args, scale)
}

// bwdPass is one Backward call: its inputs, the task order and the
// accumulators its phases share.
type bwdPass[T elem] struct {
	d                       Dims
	q, k, v, dout           []T
	lse                     []T
	scale                   float64
	src                     *blockSource
	bq, bkv, nq, nkv, group int
	shared                  bool
	delta                   []float64 // D_i = dout_i · out_i
	tasks                   []int     // task t = (b*HeadsKV + hk)*nkv + kvb, in run order
	dqSum                   *orderedSum[T]
	gr                      Grads[T]
	taskGrads               [][]sparseGrad // per task position, per score parameter
	sp                      *rowProg
	sf                      *frame
}

// backward runs the phases of Backward: row deltas, the task order and the
// dq reduction plan, the kv-block tasks, and the score tensor gradients.
func backward[T elem](d Dims, q, k, v, out, lse, dout []T, src *blockSource, score *ScoreProgram, args *Args, scale float64) Grads[T] {
	D := d.HeadDim
	nRows := d.Batch * d.HeadsQ * d.LenQ
	checkLen("q", len(q), nRows*D)
	checkLen("out", len(out), nRows*D)
	checkLen("dout", len(dout), nRows*D)
	checkLen("lse", len(lse), nRows)
	checkLen("k", len(k), d.Batch*d.HeadsKV*d.LenKV*D)
	checkLen("v", len(v), d.Batch*d.HeadsKV*d.LenKV*D)
	bp := &bwdPass[T]{d: d, q: q, k: k, v: v, dout: dout, lse: lse, scale: scale, src: src,
		bq: src.bq, bkv: src.bkv, nq: src.nq, nkv: src.nkv, group: d.Group(), shared: src.sharedHeads(),
		gr: Grads[T]{DQ: make([]T, len(q)), DK: make([]T, len(k)), DV: make([]T, len(v))}}
	bp.delta = rowDeltas(d, bp.bq, bp.nq, out, dout)
	bp.sp, bp.sf = bindScore(score, args, bp.bkv)
	bp.planTasks()
	workers := workerCount(len(bp.tasks))
	scratch := make([]*bwdScratch[T], workers)
	parallelFor(len(bp.tasks), workers, func(w, ti int) {
		if scratch[w] == nil {
			scratch[w] = bp.newScratch()
		}
		bp.task(scratch[w], ti)
	})
	if bp.sp != nil {
		bp.gr.Tensors = sumTensorGrads[T](score.plan, bp.sf, bp.taskGrads)
	}
	mustCheck(bp.sf)
	return bp.gr
}

// rowDeltas returns D_i = dout_i · out_i for every query row.
func rowDeltas[T elem](d Dims, bq, nq int, out, dout []T) []float64 {
	D := d.HeadDim
	delta := make([]float64, d.Batch*d.HeadsQ*d.LenQ)
	tiles := d.Batch * d.HeadsQ * nq
	parallelFor(tiles, workerCount(tiles), func(_, t int) {
		bh, qb := t/nq, t%nq
		q0 := qb * bq
		m := min(bq, d.LenQ-q0)
		row0 := bh*d.LenQ + q0
		for r := row0; r < row0+m; r++ {
			s := 0.0
			at := d.OutRow(bh/d.HeadsQ, bh%d.HeadsQ, r-bh*d.LenQ)
			o, g := out[at:at+D], dout[at:at+D]
			for x := range o {
				s += float64(o[x]) * float64(g[x])
			}
			delta[r] = s
		}
	})
	return delta
}

// split decodes task t into its batch, kv head and kv block.
func (bp *bwdPass[T]) split(t int) (b, hk, kvb int) {
	d := bp.d
	return t / (d.HeadsKV * bp.nkv), t / bp.nkv % d.HeadsKV, t % bp.nkv
}

// planTasks orders the kv-block tasks by cost and plans the dq reduction:
// dq sums the q tiles each task adds into, per tile in task-position order
// (see orderedSum), so the result does not depend on scheduling.
func (bp *bwdPass[T]) planTasks() {
	d, src, group := bp.d, bp.src, bp.group
	bp.tasks = taskOrder(d.Batch*d.HeadsKV*bp.nkv, func(t int) int {
		b, hk, kvb := bp.split(t)
		if src.dense != nil {
			return group * bp.nq
		}
		c := 0
		for h := hk * group; h < (hk+1)*group; h++ {
			part, full := src.sparse.QBlocks(b, h, kvb)
			c += len(part) + len(full)
		}
		return c
	})
	tilesOf := func(ti int, fn func(tile int)) {
		b, hk, kvb := bp.split(bp.tasks[ti])
		h0, h1 := hk*group, (hk+1)*group
		if bp.shared {
			src.colBlocks(b, h0, kvb, func(qb int, _ blockKind) {
				for h := h0; h < h1; h++ {
					fn((b*d.HeadsQ+h)*bp.nq + qb)
				}
			})
			return
		}
		for h := h0; h < h1; h++ {
			src.colBlocks(b, h, kvb, func(qb int, _ blockKind) { fn((b*d.HeadsQ+h)*bp.nq + qb) })
		}
	}
	D, bq, nq := d.HeadDim, bp.bq, bp.nq
	bp.dqSum = newOrderedSum(bp.gr.DQ, d.Batch*d.HeadsQ*nq, bq*D, func(tile int) (int, int) {
		q0 := tile % nq * bq
		return (tile/nq*d.LenQ + q0) * D, min(bq, d.LenQ-q0) * D
	}, len(bp.tasks), tilesOf)
	if bp.sp != nil {
		bp.taskGrads = make([][]sparseGrad, len(bp.tasks))
	}
}

func (bp *bwdPass[T]) newScratch() *bwdScratch[T] {
	bq, bkv, D := bp.bq, bp.bkv, bp.d.HeadDim
	sc := &bwdScratch[T]{s: make([]T, bq*bkv), dp: make([]T, bq*bkv),
		dq: make([]T, bq*D), dk: make([]T, bkv*D), dv: make([]T, bkv*D),
		raw: make([]float64, bkv), g: make([]float64, bkv), ds: make([]float64, bkv),
		tm: newTileMask(bq, bkv)}
	if bp.src.maskProg != nil {
		sc.mev = bp.src.maskProg.newEval(bp.src.maskArgs)
	}
	if bp.sp != nil {
		sc.gev = bp.sp.newGradEval(bp.sf)
	}
	return sc
}

// task runs the task at position ti: every q tile that sees kv block kvb
// of (b, kv head hk), writing dk and dv of the block and adding dq tiles
// and score tensor gradients.
func (bp *bwdPass[T]) task(sc *bwdScratch[T], ti int) {
	d, src, D, bq, bkv, nq := bp.d, bp.src, bp.d.HeadDim, bp.bq, bp.bkv, bp.nq
	b, hk, kvb := bp.split(bp.tasks[ti])
	k0 := kvb * bkv
	n := min(bkv, d.LenKV-k0)
	kvRow := (b*d.HeadsKV+hk)*d.LenKV + k0
	kb, vb := bp.k[kvRow*D:(kvRow+n)*D], bp.v[kvRow*D:(kvRow+n)*D]
	clear(sc.dk[:n*D])
	clear(sc.dv[:n*D])
	// visit evaluates the mask of (qb, kv block) for head ha once and runs
	// pair for heads [ha, hb).
	visit := func(ha, hb, qb int, kind blockKind) {
		q0 := qb * bq
		m := min(bq, d.LenQ-q0)
		var groups, cols []span
		switch kind {
		case kindPartial:
			sc.mev.setBH(b, ha)
			if !sc.tm.evalProgram(sc.mev, q0, m, k0, n) {
				for h := ha; h < hb; h++ {
					bp.dqSum.add((b*d.HeadsQ+h)*nq+qb, ti, nil)
				}
				return
			}
			groups, cols = sc.tm.groups, sc.tm.cols
		case kindDense:
			src.dense.tile(sc.tm, b, ha, q0, m, k0, n)
		}
		for h := ha; h < hb; h++ {
			bp.pair(sc, ti, b, h, qb, k0, n, kb, vb, kind, groups, cols)
		}
	}
	h0, h1 := hk*bp.group, (hk+1)*bp.group
	if bp.shared {
		src.colBlocks(b, h0, kvb, func(qb int, kind blockKind) { visit(h0, h1, qb, kind) })
	} else {
		for h := h0; h < h1; h++ {
			src.colBlocks(b, h, kvb, func(qb int, kind blockKind) { visit(h, h+1, qb, kind) })
		}
	}
	copy(bp.gr.DK[kvRow*D:(kvRow+n)*D], sc.dk[:n*D])
	copy(bp.gr.DV[kvRow*D:(kvRow+n)*D], sc.dv[:n*D])
	if bp.taskGrads != nil {
		tg := make([]sparseGrad, len(sc.gev.tg))
		for i, g := range sc.gev.tg {
			if g != nil {
				tg[i] = g.take()
			}
		}
		bp.taskGrads[ti] = tg
	}
}

// pair accumulates the contributions of q tile qb of head h against the kv
// block [k0, k0+n) (keys kb, values vb), whose mask (for partial and dense
// blocks) is in sc.tm.
func (bp *bwdPass[T]) pair(sc *bwdScratch[T], ti, b, h, qb, k0, n int, kb, vb []T, kind blockKind, groups, cols []span) {
	d, D, bq, bkv := bp.d, bp.d.HeadDim, bp.bq, bp.bkv
	q0 := qb * bq
	m := min(bq, d.LenQ-q0)
	row0 := (b*d.HeadsQ+h)*d.LenQ + q0
	tile := (b*d.HeadsQ+h)*bp.nq + qb
	ldo, o0 := d.OutStride(), d.OutRow(b, h, q0) // dout's rows of the tile
	qt, dot := bp.q[row0*D:(row0+m)*D], bp.dout[o0:o0+(m-1)*ldo+D]
	gemmNT(sc.s, bkv, qt, D, kb, D, m, n, D, groups, nil, T(bp.scale), false)
	gemmNT(sc.dp, bkv, dot, ldo, vb, D, m, n, D, groups, nil, 1, false)
	if sc.gev != nil {
		sc.gev.setBH(b, h)
	}
	for i := 0; i < m; i++ {
		js, je := 0, n
		if groups != nil {
			js, je = int(groups[i/rowGroup].lo), int(groups[i/rowGroup].hi)
		}
		srow, dsrow := sc.s[i*bkv:i*bkv+n], sc.dp[i*bkv:i*bkv+n]
		l := float64(bp.lse[row0+i])
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
			probGrad(srow, dsrow, ok, l, bp.delta[row0+i])
			continue
		}
		scoreRowGrad(sc, q0+i, k0+js, srow, dsrow, ok, l, bp.delta[row0+i])
	}
	// dv += Pᵀ·dout, dk += scale·dSᵀ·q, dq = scale·dS·k: P and dS are read
	// transposed in place (row stride 1, inner stride bkv).
	gemmAcc(sc.dv, D, sc.s, 1, bkv, dot, ldo, n, D, m, cols, 1)
	gemmAcc(sc.dk, D, sc.dp, 1, bkv, qt, D, n, D, m, cols, T(bp.scale))
	clear(sc.dq[:m*D])
	gemmAcc(sc.dq, D, sc.dp, bkv, 1, kb, D, m, D, n, groups, T(bp.scale))
	sc.dq = bp.dqSum.add(tile, ti, sc.dq)
}

// sumTensorGrads sums the tasks' score tensor gradients in task-position
// order, like dq, so that they are deterministic.
func sumTensorGrads[T elem](p *plan, sf *frame, taskGrads [][]sparseGrad) map[string][]T {
	out := map[string][]T{}
	for i, prm := range p.params {
		if prm.Kind != ParamFloatTensor {
			continue
		}
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
		out[prm.Name] = g
	}
	return out
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
