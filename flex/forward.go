package flex

import (
	"math"
	"sort"

	"dflash/internal/ceil"
)

// blockSource enumerates the (kv block, kind) pairs of each q tile: from a
// BlockMask (sparse) or every block against a dense mask (reference).
type blockSource struct {
	d        Dims
	bq, bkv  int
	nq, nkv  int
	sparse   *BlockMask
	dense    *DenseMask
	maskProg *rowProg // compiled mask, for partial blocks
	maskArgs *frame
}

func sparseSource(d Dims, bm *BlockMask) *blockSource {
	return &blockSource{d: d, bq: bm.BlockQ, bkv: bm.BlockKV, nq: bm.NumQBlocks, nkv: bm.NumKVBlocks,
		sparse: bm, maskProg: bm.rows, maskArgs: bm.frame}
}

// rowBlocks calls fn for each kv block of q tile qb of (b, h).
func (s *blockSource) rowBlocks(b, h, qb int, fn func(kvb int, kind blockKind)) {
	if s.dense != nil {
		for kvb := 0; kvb < s.nkv; kvb++ {
			fn(kvb, kindDense)
		}
		return
	}
	part, full := s.sparse.KVBlocks(b, h, qb)
	mergeBlocks(part, full, fn)
}

// colBlocks calls fn for each q block of kv block kvb of (b, h).
func (s *blockSource) colBlocks(b, h, kvb int, fn func(qb int, kind blockKind)) {
	if s.dense != nil {
		for qb := 0; qb < s.nq; qb++ {
			fn(qb, kindDense)
		}
		return
	}
	part, full := s.sparse.QBlocks(b, h, kvb)
	mergeBlocks(part, full, fn)
}

// mergeBlocks visits the partial and full lists in ascending block order.
func mergeBlocks(part, full []int32, fn func(int, blockKind)) {
	i, j := 0, 0
	for i < len(part) || j < len(full) {
		if j == len(full) || (i < len(part) && part[i] < full[j]) {
			fn(int(part[i]), kindPartial)
			i++
		} else {
			fn(int(full[j]), kindFull)
			j++
		}
	}
}

// rowCost is the number of kv blocks of q tile qb of (b, h).
func (s *blockSource) rowCost(b, h, qb int) int {
	if s.dense != nil {
		return s.nkv
	}
	part, full := s.sparse.KVBlocks(b, h, qb)
	return len(part) + len(full)
}

// fwdScratch is one worker's buffers for the forward pass: shared ones and
// the running softmax state of each head of a task.
type fwdScratch[T elem] struct {
	s        []T
	acc      [][]T       // per head: bq x D
	mrow     [][]float64 // per head: running row maximum
	lrow     [][]float64 // per head: running row sum
	f64      []float64
	tm       *tileMask
	mev, sev *rowEval
}

// headTasks splits the query heads of each kv head into chunks that form
// one task with a q tile: the chunk's heads share K/V blocks and, when the
// mask does not read h, the evaluated masks of partial blocks. Chunks are
// the whole group unless that leaves fewer than two tasks per worker.
func headTasks(d Dims, nq int) (chunk, chunks int) {
	g := d.Group()
	chunk = g
	for chunk > 1 && d.Batch*d.HeadsKV*nq*(g/chunk) < 2*workerCount(1<<30) {
		chunk = (chunk + 1) / 2
	}
	return chunk, ceil.Div(g, chunk)
}

func (s *blockSource) sharedHeads() bool {
	if s.dense != nil {
		return s.dense.MaskHeads == 1
	}
	return s.sparse.MaskHeads == 1
}

// Forward computes out = softmax(score(q·kᵀ·scale) masked)·v and lse, the
// natural log-sum-exp of the masked (score-modified) scores of each query:
//
//	s_ij   = score(scale · q_i·k_j, b, h, i, j)   for mask(b, h, i, j), else -Inf
//	lse_i  = log Σ_j exp(s_ij)
//	out_i  = Σ_j exp(s_ij - lse_i) · v_j
//
// Rows with no allowed key give out 0 and lse -Inf. out is laid out as
// d.OutHeadsInner says, lse as q without its last dimension. Work is
// proportional to the non-empty blocks of bm; full blocks skip the mask and
// partial ones evaluate it per element. score nil is the identity; args supplies the
// score program's parameters (the mask's are in bm). Query head h reads kv
// head h / (HeadsQ/HeadsKV) without copying. It runs on up to GOMAXPROCS
// goroutines. It panics on inconsistent shapes or missing score parameters,
// and in the checked mode with the *IndexError of an out-of-range read of
// the score program: programmer errors (see the package doc, Tensor indices).
func Forward[T float32 | float64](d Dims, q, k, v []T, bm *BlockMask, score *ScoreProgram, args *Args, scale float64) (out, lse []T) {
	checkDims(d, bm)
	return forward(d, q, k, v, sparseSource(d, bm), score, args, scale)
}

func forward[T elem](d Dims, q, k, v []T, src *blockSource, score *ScoreProgram, args *Args, scale float64) (out, lse []T) {
	D := d.HeadDim
	checkLen("q", len(q), d.Batch*d.HeadsQ*d.LenQ*D)
	checkLen("k", len(k), d.Batch*d.HeadsKV*d.LenKV*D)
	checkLen("v", len(v), d.Batch*d.HeadsKV*d.LenKV*D)
	out = make([]T, len(q))
	lse = make([]T, d.Batch*d.HeadsQ*d.LenQ)
	sp, sf := bindScore(score, args, src.bkv)
	bq, bkv, nq := src.bq, src.bkv, src.nq
	group := d.Group()
	chunk, chunks := headTasks(d, nq)
	shared := src.sharedHeads()
	// Task t = ((b*HeadsKV + hk)*chunks + c)*nq + qb.
	split := func(t int) (b, h0, h1, qb int) {
		qb, t = t%nq, t/nq
		c, t := t%chunks, t/chunks
		hk, b := t%d.HeadsKV, t/d.HeadsKV
		h0 = hk*group + c*chunk
		return b, h0, min(h0+chunk, (hk+1)*group), qb
	}
	tasks := taskOrder(d.Batch*d.HeadsKV*chunks*nq, func(t int) int {
		b, h0, h1, qb := split(t)
		return (h1 - h0) * src.rowCost(b, h0, qb)
	})
	workers := workerCount(len(tasks))
	scratch := make([]*fwdScratch[T], workers)
	parallelFor(len(tasks), workers, func(w, ti int) {
		sc := scratch[w]
		if sc == nil {
			sc = &fwdScratch[T]{s: make([]T, bq*bkv), f64: make([]float64, bkv),
				tm: newTileMask(bq, bkv)}
			for range chunk {
				sc.acc = append(sc.acc, make([]T, bq*D))
				sc.mrow = append(sc.mrow, make([]float64, bq))
				sc.lrow = append(sc.lrow, make([]float64, bq))
			}
			if src.maskProg != nil {
				sc.mev = src.maskProg.newEval(src.maskArgs)
			}
			if sp != nil {
				sc.sev = sp.newEval(sf)
			}
			scratch[w] = sc
		}
		b, h0, h1, qb := split(tasks[ti])
		hk := h0 / group
		q0 := qb * bq
		m := min(bq, d.LenQ-q0)
		kvOff := (b*d.HeadsKV + hk) * d.LenKV * D
		kb, vb := k[kvOff:kvOff+d.LenKV*D], v[kvOff:kvOff+d.LenKV*D]
		for x := range h1 - h0 {
			for i := 0; i < m; i++ {
				sc.mrow[x][i], sc.lrow[x][i] = math.Inf(-1), 0
			}
			clear(sc.acc[x][:m*D])
		}
		// block processes kv block kvb for heads [ha, hb), evaluating a
		// partial or dense mask once for all of them.
		block := func(ha, hb, kvb int, kind blockKind) {
			k0 := kvb * bkv
			n := min(bkv, d.LenKV-k0)
			var groups []span
			switch kind {
			case kindPartial:
				sc.mev.setBH(b, ha)
				if !sc.tm.evalProgram(sc.mev, q0, m, k0, n) {
					return
				}
				groups = sc.tm.groups
			case kindDense:
				src.dense.tile(sc.tm, b, ha, q0, m, k0, n)
			}
			vblk := vb[k0*D : (k0+n)*D]
			for h := ha; h < hb; h++ {
				x := h - h0
				row0 := (b*d.HeadsQ+h)*d.LenQ + q0
				qt := q[row0*D : (row0+m)*D]
				gemmNT(sc.s, bkv, qt, D, kb[k0*D:(k0+n)*D], D, m, n, D, groups, nil, T(scale), false)
				if sc.sev != nil {
					sc.sev.setBH(b, h)
				}
				softmaxBlock(sc, x, m, n, bkv, D, k0, q0, groups, kind)
				gemmAcc(sc.acc[x], D, sc.s, bkv, 1, vblk, D, m, D, n, groups, 1)
			}
		}
		if shared {
			src.rowBlocks(b, h0, qb, func(kvb int, kind blockKind) { block(h0, h1, kvb, kind) })
		} else {
			for h := h0; h < h1; h++ {
				src.rowBlocks(b, h, qb, func(kvb int, kind blockKind) { block(h, h+1, kvb, kind) })
			}
		}
		for h := h0; h < h1; h++ {
			x := h - h0
			row0 := (b*d.HeadsQ+h)*d.LenQ + q0
			for i := 0; i < m; i++ {
				o := out[d.OutRow(b, h, q0+i):][:D]
				if sc.lrow[x][i] == 0 {
					lse[row0+i] = T(math.Inf(-1))
					continue // out stays 0
				}
				inv := 1 / sc.lrow[x][i]
				a := sc.acc[x][i*D : (i+1)*D]
				for y := range o {
					o[y] = T(float64(a[y]) * inv)
				}
				lse[row0+i] = T(sc.mrow[x][i] + math.Log(sc.lrow[x][i]))
			}
		}
	})
	mustCheck(sf)
	return out, lse
}

// softmaxBlock turns the scores of one block in sc.s into probabilities
// relative to the running maximum of head slot x (online softmax): it
// applies the score program and the mask, updates the running maximum and
// sum, and rescales the head's accumulator when the maximum grows.
func softmaxBlock[T elem](sc *fwdScratch[T], x, m, n, bkv, D, k0, q0 int, groups []span, kind blockKind) {
	mrow, lrow, acc := sc.mrow[x], sc.lrow[x], sc.acc[x]
	for i := 0; i < m; i++ {
		js, je := 0, n
		if groups != nil {
			js, je = int(groups[i/rowGroup].lo), int(groups[i/rowGroup].hi)
		}
		if js >= je {
			continue
		}
		row := sc.s[i*bkv+js : i*bkv+je]
		if sc.sev != nil {
			applyScore(sc.sev, q0+i, k0+js, row, sc.f64)
		}
		if kind != kindFull {
			ok := sc.tm.ok[i*n+js : i*n+je]
			for j := range row {
				if !ok[j] {
					row[j] = T(math.Inf(-1))
				}
			}
		}
		mx := T(math.Inf(-1))
		for _, v := range row {
			if v > mx {
				mx = v
			}
		}
		if math.IsInf(float64(mx), -1) {
			clear(row)
			continue
		}
		mold := mrow[i]
		mnew := max(mold, float64(mx))
		sum := expShift(row, mnew)
		if mnew != mold && lrow[i] != 0 {
			c := math.Exp(mold - mnew)
			lrow[i] *= c
			a := acc[i*D : (i+1)*D]
			for y := range a {
				a[y] *= T(c)
			}
		}
		lrow[i] += sum
		mrow[i] = mnew
	}
}

// applyScore replaces row (scores of keys kv0.. for query q) by the score
// program's result, through a float64 buffer.
func applyScore[T elem](ev *rowEval, q, kv0 int, row []T, buf []float64) {
	ev.setRow(q)
	b := buf[:len(row)]
	for j, x := range row {
		b[j] = float64(x)
	}
	ev.scoreRow(kv0, b)
	for j, x := range b {
		row[j] = T(x)
	}
}

// bindScore compiles and binds a score program, panicking when args lack
// one of its parameters (a programming error of the caller).
func bindScore(score *ScoreProgram, args *Args, width int) (*rowProg, *frame) {
	if score == nil {
		return nil, nil
	}
	f, err := bind(score.plan, "score "+score.name, args)
	if err != nil {
		panic(err.Error())
	}
	return compileRows(score.plan, width), f
}

// mustCheck panics with the first out-of-range tensor read of a score
// program in the checked mode (a programmer error, like a shape mismatch;
// the mask's reads were checked by NewBlockMask, which returns an error).
func mustCheck(f *frame) {
	if err := checkErr(f); err != nil {
		panic(err)
	}
}

// taskOrder returns the task indices [0, n) ordered by decreasing cost, so
// the largest tasks start first and the dynamic schedule ends balanced.
func taskOrder(n int, cost func(int) int) []int {
	t := make([]int, n)
	c := make([]int, n)
	for i := range t {
		t[i] = i
		c[i] = cost(i)
	}
	sort.SliceStable(t, func(a, b int) bool { return c[t[a]] > c[t[b]] })
	return t
}
