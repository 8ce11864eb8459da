package tensorcuda

import (
	"cmp"
	"fmt"
	"slices"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/ceil"
	"dflash/tensor"
)

// QuantizeRowsE4M3 writes one float32 scale per row of x (storage dtype,
// rows×cols) into scales, scales[r] = max_j |x[r][j]|/448 (1 for a row of
// zeros, NaNs not counted), and the OCP FP8 E4M3 codes of x[r][j]/scales[r]
// into codes (rows×cols bytes; nearest even, saturating at ±448): the
// activation side of gpu.GemmFP8 with per-token scales, and on the device
// what quant.RowScales and quant.QuantizeRows compute. One block per row
// (rowThreads).
func (o *Ops) QuantizeRowsE4M3(x gpu.Buffer, rows, cols int, codes, scales gpu.Buffer) error {
	need("QuantizeRowsE4M3", "x", x, int64(rows)*int64(cols), o.es())
	need("QuantizeRowsE4M3", "codes", codes, int64(rows)*int64(cols), 1)
	need("QuantizeRowsE4M3", "scales", scales, int64(rows), 4)
	if rows == 0 {
		return nil
	}
	if cols <= 0 {
		panic(fmt.Sprintf("tensorcuda: QuantizeRowsE4M3: %d columns", cols))
	}
	c := o.begin(kQuantE4M3).ptr("x", x).i32("rows", rows).i32("cols", cols).ptr("codes", codes).ptr("scales", scales)
	return o.launch(c, cuda.Dim(uint32(rows), 1, 1), o.rowThreads(cols))
}

// rowVecs is the most 16-byte vectors of a row that a thread of the
// one-block-per-row kernels that hold a row (op_rmsnorm_fwd and the
// one-pass E4M3 producers op_quant_rows_e4m3, op_rmsnorm_e4m3,
// op_swiglu_packed_e4m3) holds in registers (OP_ROW_VECS, compileOptions):
// with threads threads, rows of up to 16384 bf16 elements are read once.
const rowVecs = 8

// rowThreads returns the block of the norms and the quantization for rows
// of cols storage elements: the fewest whole warps whose threads hold
// rowVecs vectors each, so that the registers a block reserves hold the
// row and an SM runs several rows at once (a row of 4096 bf16 elements: 64
// threads; bf16 RMSNorm 16384x4096 92 -> 76 us, docs/PERF.md 2026-12-06),
// at most threads (the arrays' registers do not fit more: a launch of 640
// failed); threads for rows that are not whole vectors. Rows of more than
// rowVecs·threads vectors take the kernels' loops. The block fixes the
// order of a row's sums, so kernels that must agree bit for bit take the
// same block. SwiGLU's E4M3 rows keep threads: their elements cost more
// arithmetic than loads, and 192 threads a row of 12288 ran slower.
func (o *Ops) rowThreads(cols int) int {
	v := int(16 / o.es())
	if cols <= 0 || cols%v != 0 {
		return threads
	}
	return min(threads, ceil.Div(ceil.Div(cols/v, rowVecs), 32)*32)
}

// RMSNormE4M3 is RMSNorm of x into E4M3 rows: y = x·rstd·w as RMSNorm
// stores it, quantized per row as QuantizeRowsE4M3 does (codes rows·dim
// bytes, scales rows floats), rstd written as RMSNorm writes it. Rows of
// more than smallNormDim (FusesNorm) take one pass, op_rmsnorm_e4m3, equal
// bit for bit to the two kernels on aligned rows; smaller ones run RMSNorm
// into stage (rows·dim storage elements, given only then) and
// QuantizeRowsE4M3.
func (o *Ops) RMSNormE4M3(x, w gpu.Buffer, rows, dim int, eps float64, codes, scales, rstd, stage gpu.Buffer) error {
	if !o.FusesNorm(dim) {
		if err := o.RMSNorm(x, w, rows, dim, eps, stage, rstd); err != nil {
			return err
		}
		return o.QuantizeRowsE4M3(stage, rows, dim, codes, scales)
	}
	need("RMSNormE4M3", "x", x, int64(rows)*int64(dim), o.es())
	need("RMSNormE4M3", "w", w, int64(dim), o.es())
	need("RMSNormE4M3", "codes", codes, int64(rows)*int64(dim), 1)
	need("RMSNormE4M3", "scales", scales, int64(rows), 4)
	need("RMSNormE4M3", "rstd", rstd, int64(rows), 4)
	if rows == 0 {
		return nil
	}
	c := o.begin(kRMSNormE4M3).ptr("x", x).ptr("w", w).ptr("codes", codes).ptr("scales", scales).ptr("rstd", rstd).
		i32("rows", rows).i32("dim", dim).f32("eps", float32(eps))
	return o.launch(c, o.normGrid(rows, 0), o.rowThreads(dim))
}

// FusesNorm reports whether RMSNormE4M3 of rows of dim elements runs in one
// pass (needing no stage).
func (o *Ops) FusesNorm(dim int) bool { return o.normLanes(dim) == 0 }

// SwiGLUPackedE4M3 is SwiGLUPacked of y2 [rows, 2·cols] into E4M3 rows:
// out = silu(gate)·up as SwiGLUPacked stores it, quantized per row as
// QuantizeRowsE4M3 does (codes rows·cols bytes, scales rows floats), in
// one pass (op_swiglu_packed_e4m3), equal bit for bit to the two kernels.
func (o *Ops) SwiGLUPackedE4M3(y2 gpu.Buffer, rows, cols int, codes, scales gpu.Buffer) error {
	n := int64(rows) * int64(cols)
	need("SwiGLUPackedE4M3", "y2", y2, 2*n, o.es())
	need("SwiGLUPackedE4M3", "codes", codes, n, 1)
	need("SwiGLUPackedE4M3", "scales", scales, int64(rows), 4)
	if n == 0 {
		return nil
	}
	c := o.begin(kSwiGLUPackedE4M3).ptr("y2", y2).ptr("codes", codes).ptr("scales", scales).i32("rows", rows).i32("cols", cols)
	return o.launch(c, cuda.Dim(uint32(rows), 1, 1), threads)
}

// FP8Weight is a linear layer's weight W (Out×In, row-major as HF stores
// it) in OCP FP8 E4M3 with one float32 scale per output channel: Codes
// holds Out·In bytes, Scales Out floats (quant.RowScales and
// quant.QuantizeRows of the weight, computed at load).
type FP8Weight struct {
	Codes, Scales gpu.Buffer
	Out, In       int
}

// LinearFP8 computes y = x·Wᵀ + beta·C for x (rows×w.In, storage dtype)
// through E4M3: x is quantized per token into xq (rows·w.In bytes) and xs
// (rows floats) by QuantizeRowsE4M3, then one cuBLASLt FP8 product with
// per-token and per-channel scales (gpu.GemmFP8, ScaleRowsCols; fast
// accumulation with DFLASH_FP8_FAST_ACCUM) writes y
// (rows×w.Out, storage dtype; y is c or does not overlap it). w.In must be
// a multiple of 16 and a row of y a multiple of 16 bytes.
func (o *Ops) LinearFP8(x gpu.Buffer, rows int, w FP8Weight, xq, xs gpu.Buffer, beta float32, c, y gpu.Buffer) error {
	if err := o.QuantizeRowsE4M3(x, rows, w.In, xq, xs); err != nil {
		return err
	}
	return o.LinearE4M3(xq, xs, rows, w, beta, c, y)
}

// LinearE4M3 is LinearFP8 of x given in E4M3 rows (codes xq, rows·w.In
// bytes, and scales xs, rows floats: what QuantizeRowsE4M3,
// RMSNormE4M3 and SwiGLUPackedE4M3 write).
func (o *Ops) LinearE4M3(xq, xs gpu.Buffer, rows int, w FP8Weight, beta float32, c, y gpu.Buffer) error {
	need("LinearE4M3", "x codes", xq, int64(rows)*int64(w.In), 1)
	need("LinearE4M3", "x scales", xs, int64(rows), 4)
	need("LinearE4M3", "W codes", w.Codes, int64(w.Out)*int64(w.In), 1)
	need("LinearE4M3", "W scales", w.Scales, int64(w.Out), 4)
	need("LinearE4M3", "y", y, int64(rows)*int64(w.Out), o.es())
	if beta != 0 {
		need("LinearE4M3", "C", c, int64(rows)*int64(w.Out), o.es())
	}
	if rows == 0 {
		return nil
	}
	spec := gpu.GemmSpec{M: rows, N: w.Out, K: w.In, TransB: true, In: dtype.F8E4M3, Out: o.dt, Scale: gpu.ScaleRowsCols, FastAccum: o.fp8Fast}
	return o.run.gemmFP8(spec, 1, xq, xs, w.Codes, w.Scales, beta, c, y)
}

// A frozen target's arena with its matrices in FP8 (tensor.FP8Params): the
// parameters outside the FP8 segments (embeddings, norms, the LM head) in
// one bf16 allocation, the FP8 segments' codes in another and their row
// scales in a third, each packed in arena order, so that consecutive
// parameters of the arena (a tensor.Span) are consecutive in their
// allocation too.

// frozenSeg is a run of arena elements [lo, hi) held one way: in bf16 at
// element at of the bf16 allocation, or (cols > 0) in FP8 at byte at of the
// codes, rows of cols, the first row's scale at index row of the scales.
type frozenSeg struct {
	lo, hi, at, row, cols int
}

// frozenPlan lays out an arena of n elements whose segments fp8 are held
// in FP8: the runs of both kinds in arena order (adjacent FP8 segments of
// one row length merged into one run, the elements between FP8 segments
// into bf16 runs) and the sizes of the three allocations. It is an error
// when the segments are not ascending, disjoint, within n and whole rows
// of a length FP8 products take (a multiple of 16).
func frozenPlan(n int, fp8 []tensor.Segment) (runs []frozenSeg, bf16, codes, rows int, err error) {
	pos := 0
	for _, s := range fp8 {
		switch {
		case s.Off < pos || s.Len <= 0 || s.Off+s.Len > n:
			return nil, 0, 0, 0, fmt.Errorf("tensorcuda: FP8 segment [%d, %d) of an arena of %d elements: overlapping, unordered or outside", s.Off, s.Off+s.Len, n)
		case s.Cols <= 0 || s.Cols%16 != 0 || s.Len%s.Cols != 0:
			return nil, 0, 0, 0, fmt.Errorf("tensorcuda: FP8 segment [%d, %d): rows of %d elements (FP8 products need whole rows of a multiple of 16)", s.Off, s.Off+s.Len, s.Cols)
		}
		if s.Off > pos {
			runs = append(runs, frozenSeg{lo: pos, hi: s.Off, at: bf16})
			bf16 += s.Off - pos
		}
		if k := len(runs) - 1; k >= 0 && runs[k].cols == s.Cols && runs[k].hi == s.Off {
			runs[k].hi += s.Len
		} else {
			runs = append(runs, frozenSeg{lo: s.Off, hi: s.Off + s.Len, at: codes, row: rows, cols: s.Cols})
		}
		codes += s.Len
		rows += s.Len / s.Cols
		pos = s.Off + s.Len
	}
	if pos < n {
		runs = append(runs, frozenSeg{lo: pos, hi: n, at: bf16})
		bf16 += n - pos
	}
	return runs, bf16, codes, rows, nil
}

// findRun returns the run holding elements [lo, hi) (lo < hi), or false when
// they are not wholly in one.
func findRun(runs []frozenSeg, lo, hi int) (frozenSeg, bool) {
	k, _ := slices.BinarySearchFunc(runs, lo, func(r frozenSeg, x int) int { return cmp.Compare(r.hi, x+1) })
	if k == len(runs) || runs[k].lo > lo || hi > runs[k].hi {
		return frozenSeg{}, false
	}
	return runs[k], true
}

// frozen is the compute storage of a frozen arena with FP8 matrices
// (AllocParamsFP8); its Slices are Bufs of either kind.
type frozen struct {
	n             int
	runs          []frozenSeg
	bf            Buf
	codes, scales cuda.DevicePtr
}

// Len returns the arena's elements.
func (f *frozen) Len() int { return f.n }

// DType returns dtype.BF16, the dtype of the parameters not in FP8.
func (f *frozen) DType() dtype.DType { return dtype.BF16 }

// Slice returns the view of elements [lo, hi): a bf16 Buf, or an FP8 Buf
// of whole rows; it panics for a range that spans both kinds.
func (f *frozen) Slice(lo, hi int) tensor.Storage[float32] {
	checkRange("frozen.Slice", lo, hi, f.n)
	if lo == hi {
		return f.bf.Slice(0, 0)
	}
	r, ok := findRun(f.runs, lo, hi)
	if !ok {
		panic(fmt.Sprintf("tensorcuda: frozen.Slice(%d, %d): spans FP8 and bf16 parameters", lo, hi))
	}
	if r.cols == 0 {
		return f.bf.Slice(r.at+lo-r.lo, r.at+hi-r.lo)
	}
	m := Buf{be: f.bf.be, ptr: f.codes + cuda.DevicePtr(r.at), n: r.hi - r.lo, dt: dtype.F8E4M3,
		scales: f.scales + cuda.DevicePtr(4*r.row), cols: r.cols}
	return m.Slice(lo-r.lo, hi-r.lo)
}

// Like panics: a frozen arena has no gradient.
func (f *frozen) Like(int) tensor.Storage[float32] {
	panic("tensorcuda: Like of a frozen arena with FP8 matrices: it has no gradient")
}

// LikeOut panics as Like does.
func (f *frozen) LikeOut(n int) tensor.Storage[float32] { return f.Like(n) }

// AllocParamsFP8 returns the compute storage of a frozen arena of n
// elements with the segments fp8 in FP8 E4M3, a float32 scale per row
// (tensor.FP8Params): WriteParams and WriteParamBytes quantize whole rows
// as they are written (QuantizeRowsE4M3 of the rows in bf16), and Gemm and
// GemmAdd take such a matrix as the weight W of x·Wᵀ (LinearFP8).
func (b *Backend) AllocParamsFP8(n int, fp8 []tensor.Segment) (tensor.Storage[float32], error) {
	runs, nbf, ncodes, nrows, err := frozenPlan(n, fp8)
	if err != nil {
		return nil, err
	}
	f := &frozen{n: n, runs: runs, bf: b.newBuf(nbf, dtype.BF16, true, false)}
	f.codes = b.alloc(int64(ncodes), true, false).Ptr
	f.scales = b.alloc(4*int64(nrows), true, false).Ptr
	return f, nil
}

// quantizeInto writes the rows of the FP8 matrix x: put writes their
// values into a bf16 stage of x's size in the step arena, which
// QuantizeRowsE4M3 then encodes into x's codes and scales. The stage is
// given back at once: the next write into it is queued after the encoding.
func (b *Backend) quantizeInto(op string, x Buf, put func(stage Buf)) {
	stage := b.newBuf(x.n, dtype.BF16, false, false)
	put(stage)
	rows := x.n / x.cols
	must(op, b.bf.QuantizeRowsE4M3(stage.Buffer(), rows, x.cols, x.Buffer(), x.scaleBuffer()))
	b.freeTemp(stage)
}

// scaleBuffer returns the row scales of an FP8 matrix.
func (s Buf) scaleBuffer() gpu.Buffer {
	return gpu.Buffer{Ptr: s.scales, Size: 4 * int64(s.n/s.cols)}
}

// AllocOperand returns step storage for rows×cols elements that ops write
// whole and products with w alone read, as their A operand
// (tensor.OperandAlloc): with w an FP8 matrix of rows of cols, an FP8
// activation (E4M3 codes and a float32 scale per row in one allocation),
// which RMSNorm and SwiGLUPacked write quantized (RMSNormE4M3,
// SwiGLUPackedE4M3) and the product reads as it is (LinearE4M3), equal
// bit for bit to quantizing inside the product; else AllocOut's bf16.
func (b *Backend) AllocOperand(rows, cols int, w tensor.Storage[float32]) tensor.Storage[float32] {
	if W := b.buf(w, "AllocOperand w"); W.dt != dtype.F8E4M3 || W.cols != cols || b.noFP8Prod || rows == 0 {
		return b.AllocOut(rows * cols)
	}
	n := rows * cols
	p := b.alloc(fp8ActBytes(n, cols), false, false).Ptr
	return Buf{be: b, ptr: p, n: n, dt: dtype.F8E4M3, step: b.gen, whole: true, scales: p + cuda.DevicePtr(fp8ActScalesAt(n)), cols: cols}
}

var _ tensor.OperandAlloc[float32] = (*Backend)(nil)

// QuantizeInProducers sets whether AllocOperand hands out FP8 activations
// (on, the default) or bf16 storage, each FP8 product then quantizing its
// input itself: the same results bit for bit, to measure what the fused
// passes save and to test that they are equal.
func (b *Backend) QuantizeInProducers(on bool) { b.noFP8Prod = !on }

// linearFP8 is Gemm or GemmAdd (op) with B an FP8 matrix: D = A·Bᵀ +
// beta·C through LinearFP8, A quantized per row into step-arena
// temporaries, or through LinearE4M3 when A is an FP8 activation of rows
// of k (AllocOperand). Only the frozen target's products take this form
// (A rows of k, B's rows the outputs, alpha 1, dense operands); anything
// else panics.
func (b *Backend) linearFP8(op string, transA, transB bool, m, n, k int, alpha float32, A Buf, lda int, B Buf, ldb int, beta float32, C, D Buf, ldc int) error {
	if transA || !transB || alpha != 1 || lda != k || ldb != k || ldc != n || B.cols != k || B.n != n*k ||
		A.dt == dtype.F8E4M3 && (A.cols != k || A.n != m*k) {
		panic(fmt.Sprintf("tensorcuda: %s of %v (rows of %d) with the FP8 matrix %v (rows of %d): only x·Wᵀ with W whole and dense operands runs in FP8 "+
			"(transA %v, transB %v, alpha %v, %d×%d×%d, lda %d, ldb %d, ldc %d)", op, A, A.cols, B, B.cols, transA, transB, alpha, m, n, k, lda, ldb, ldc))
	}
	w := FP8Weight{Codes: B.Buffer(), Scales: B.scaleBuffer(), Out: n, In: k}
	if A.dt == dtype.F8E4M3 {
		return b.bf.LinearE4M3(A.Buffer(), A.scaleBuffer(), m, w, beta, C.Buffer(), D.Buffer())
	}
	xq := b.newBuf(m*k, dtype.F8E4M3, false, false)
	xs := b.newBuf(m, dtype.F32, false, false)
	err := b.bf.LinearFP8(A.Buffer(), m, w, xq.Buffer(), xs.Buffer(), beta, C.Buffer(), D.Buffer())
	b.freeTemp(xs)
	b.freeTemp(xq)
	return err
}
