package tensorcuda

import (
	"dflash/cuda"
	"dflash/gpu"
	"dflash/internal/ceil"
)

// Gather copies table rows: out[i,:] = table[ids[i],:] for i < n, with table
// [tableRows, dim] and out [n, dim] in storage dtype, ids int32. An id
// outside [0, tableRows) writes a NaN row.
func (o *Ops) Gather(table gpu.Buffer, tableRows, dim int, ids gpu.Buffer, n int, out gpu.Buffer) error {
	need("Gather", "table", table, int64(tableRows)*int64(dim), o.es())
	need("Gather", "ids", ids, int64(n), 4)
	need("Gather", "out", out, int64(n)*int64(dim), o.es())
	if n == 0 || dim == 0 {
		return nil
	}
	c := o.begin(kGather).ptr("table", table).ptr("ids", ids).ptr("out", out).i32("n", n).i32("dim", dim).i32("rows", tableRows)
	return o.launch(c, cuda.Dim(uint32(n), 1, 1), threads)
}

// ScatterAdd is Gather's gradient: dtable[ids[i],:] += dout[i,:], with dout
// [n, dim] in storage dtype and dtable [tableRows, dim] fp32 (atomic adds:
// the order of additions to a repeated id varies). Ids outside
// [0, tableRows) are skipped.
func (o *Ops) ScatterAdd(dout gpu.Buffer, n, dim int, ids gpu.Buffer, dtable gpu.Buffer, tableRows int) error {
	need("ScatterAdd", "dout", dout, int64(n)*int64(dim), o.es())
	need("ScatterAdd", "ids", ids, int64(n), 4)
	need("ScatterAdd", "dtable", dtable, int64(tableRows)*int64(dim), 4)
	if n == 0 || dim == 0 {
		return nil
	}
	c := o.begin(kScatterAdd).ptr("dout", dout).ptr("ids", ids).ptr("dtable", dtable).i32("n", n).i32("dim", dim).i32("rows", tableRows)
	return o.launch(c, cuda.Dim(uint32(n), 1, 1), threads)
}

// smallNormDim is the largest row the RMSNorm kernels give fewer threads
// than a block (normLanes); larger rows get one block each.
const smallNormDim = 1024

// normLanes returns the threads per row of the small-dim RMSNorm kernels
// for rows of dim elements: a power of two, enough for one 16-byte vector
// each, at most a warp; 0 when dim > smallNormDim (one block per row).
func (o *Ops) normLanes(dim int) int {
	if dim > smallNormDim {
		return 0
	}
	v, lanes := ceil.Div(dim, int(16/o.es())), 1
	for lanes < v && lanes < 32 {
		lanes *= 2
	}
	return lanes
}

// normGrid returns the grid of an RMSNorm kernel over rows rows: one block
// per row, or with lanes threads per row enough blocks of threads/lanes rows
// to cover them, at most a few waves (the kernels stride over the rest).
func (o *Ops) normGrid(rows, lanes int) cuda.Dim3 {
	if lanes == 0 {
		return cuda.Dim(uint32(rows), 1, 1)
	}
	return o.strided(int64(rows) * int64(lanes))
}

// RMSNorm computes, per row of x [rows, dim], rstd = 1/sqrt(mean(x²)+eps)
// and y = x·rstd·w. x, w, y are storage dtype; rstd [rows] is fp32.
func (o *Ops) RMSNorm(x, w gpu.Buffer, rows, dim int, eps float64, y, rstd gpu.Buffer) error {
	need("RMSNorm", "x", x, int64(rows)*int64(dim), o.es())
	need("RMSNorm", "w", w, int64(dim), o.es())
	need("RMSNorm", "y", y, int64(rows)*int64(dim), o.es())
	need("RMSNorm", "rstd", rstd, int64(rows), 4)
	if rows == 0 || dim == 0 {
		return nil
	}
	lanes := o.normLanes(dim)
	k := kRMSNorm
	if lanes > 0 {
		k = kRMSNormSmall
	}
	c := o.begin(k).ptr("x", x).ptr("w", w).ptr("y", y).ptr("rstd", rstd).i32("rows", rows).i32("dim", dim).f32("eps", float32(eps))
	if lanes > 0 {
		c.i32("lanes", lanes)
	}
	t := threads
	if lanes == 0 {
		t = o.rowThreads(dim) // RMSNormE4M3's block: the same sums
	}
	return o.launch(c, o.normGrid(rows, lanes), t)
}

// RMSNormBackward computes, with x̂ = x·rstd and g = dy·w:
// dx = rstd·(g − x̂·mean(g·x̂)) (storage dtype; added to dx with accumulate)
// and dw += Σ_rows dy·x̂ (fp32, always added; deterministic: summed by chunks
// of rows into scratch, of ColumnScratch(rows, dim) bytes, then over the
// chunks in order). dx or dw may be null (zero Buffer); scratch is needed
// only with dw. With both, rows of whole 16-byte vectors past smallNormDim
// take one pass over x and dy for both (op_rmsnorm_bwd).
func (o *Ops) RMSNormBackward(x, w, rstd, dy gpu.Buffer, rows, dim int, dx, dw, scratch gpu.Buffer, accumulate bool) error {
	n := int64(rows) * int64(dim)
	need("RMSNormBackward", "x", x, n, o.es())
	need("RMSNormBackward", "w", w, int64(dim), o.es())
	need("RMSNormBackward", "rstd", rstd, int64(rows), 4)
	need("RMSNormBackward", "dy", dy, n, o.es())
	optional("RMSNormBackward", "dx", dx, n, o.es())
	optional("RMSNormBackward", "dw", dw, int64(dim), 4)
	if rows == 0 || dim == 0 {
		return nil
	}
	if dw.Ptr != 0 {
		need("RMSNormBackward", "scratch", scratch, ColumnScratch(rows, dim)/4, 4)
	}
	if bt := o.normFusedThreads(dim); dx.Ptr != 0 && dw.Ptr != 0 && bt > 0 && aligned16(x, w, dy, dx, scratch) {
		per, nc := normChunks(rows, dim)
		c := o.begin(kRMSNormBwd).ptr("x", x).ptr("w", w).ptr("rstd", rstd).ptr("dy", dy).ptr("dx", dx).ptr("partial", scratch).
			i32("rows", rows).i32("dim", dim).i32("rows_per_chunk", per).flag("accumulate", accumulate)
		if err := o.launch(c, cuda.Dim(uint32(nc), 1, 1), bt); err != nil {
			return err
		}
		return o.colSum(scratch, nc, dim, dw)
	}
	if dx.Ptr != 0 {
		lanes := o.normLanes(dim)
		k := kRMSNormDX
		if lanes > 0 {
			k = kRMSNormDXSmall
		}
		c := o.begin(k).ptr("x", x).ptr("w", w).ptr("rstd", rstd).ptr("dy", dy).ptr("dx", dx).i32("rows", rows).i32("dim", dim)
		if lanes > 0 {
			c.i32("lanes", lanes)
		}
		c.flag("accumulate", accumulate)
		if err := o.launch(c, o.normGrid(rows, lanes), threads); err != nil {
			return err
		}
	}
	if dw.Ptr == 0 {
		return nil
	}
	// 16-byte vectors when rows are whole vectors (op_rmsnorm_bwd_dw: a block
	// of threads threads spans min(vectors, threads) of them). With a vector
	// a thread, rows past smallNormDim take the fused kernel's chunks, which
	// keep as many loads in flight (chunks' count a thread per column).
	v := 16 / int(o.es())
	vec := dim%v == 0 && aligned16(x, dy)
	per, nc := chunks(rows, dim)
	bx := ceil.Div(dim, threads)
	if vec {
		bx = ceil.Div(dim/v, threads)
		if dim > smallNormDim {
			per, nc = normChunks(rows, dim)
		}
	}
	c := o.begin(kRMSNormDW).ptr("x", x).ptr("rstd", rstd).ptr("dy", dy).ptr("partial", scratch).i32("rows", rows).i32("dim", dim).
		i32("rows_per_chunk", per).flag("vec", vec)
	if err := o.launch(c, cuda.Dim(uint32(bx), uint32(nc), 1), threads); err != nil {
		return err
	}
	return o.colSum(scratch, nc, dim, dw)
}

// normVecs is the most 16-byte vectors of a row that a thread of
// op_rmsnorm_bwd holds (OP_NORM_VECS in op_rmsnorm.cu, compileOptions).
const normVecs = 2

// normFusedThreads returns the block of op_rmsnorm_bwd for rows of dim
// columns: whole warps, enough for normVecs vectors each to span the row;
// 0 when the row is not whole vectors, is small (the _small kernels), or
// needs more than 1024 threads.
func (o *Ops) normFusedThreads(dim int) int {
	v := 16 / int(o.es())
	if dim <= smallNormDim || dim%v != 0 {
		return 0
	}
	bt := ceil.Div(ceil.Div(dim/v, normVecs), 32) * 32
	if bt > 1024 {
		return 0
	}
	return bt
}

// colSum adds the chunks partial rows of n columns, in a fixed order, into
// v (fp32): op_colsum's blocks of colSumCols columns × colSumLanes lanes.
func (o *Ops) colSum(partial gpu.Buffer, chunks, n int, v gpu.Buffer) error {
	c := o.begin(kColSum).ptr("partial", partial).ptr("v", v).i32("chunks", chunks).i32("n", n)
	return o.launch(c, cuda.Dim(uint32(ceil.Div(n, colSumCols)), 1, 1), colSumCols*colSumLanes)
}

// op_colsum's block shape (OP_COLSUM_COLS, OP_COLSUM_LANES in op_rows.cu,
// compileOptions).
const colSumCols, colSumLanes = 32, 8

// RoPE rotates each head of x ([rows, heads, headDim], storage dtype) by the
// angles of its row in HF's rotate_half convention: with h = headDim/2,
// c = cos[r,i], s = sin[r,i] (fp32 tables [rows, h]), y[i] = x[i]·c − x[i+h]·s
// and y[i+h] = x[i+h]·c + x[i]·s. With inverse the rotation is by −angle
// (RoPE's gradient); with accumulate the result is added to y.
func (o *Ops) RoPE(x gpu.Buffer, rows, heads, headDim int, cos, sin gpu.Buffer, y gpu.Buffer, inverse, accumulate bool) error {
	if headDim%2 != 0 {
		panic("tensorcuda: RoPE: odd head dimension")
	}
	n := int64(rows) * int64(heads) * int64(headDim)
	half := headDim / 2
	need("RoPE", "x", x, n, o.es())
	need("RoPE", "y", y, n, o.es())
	need("RoPE", "cos", cos, int64(rows)*int64(half), 4)
	need("RoPE", "sin", sin, int64(rows)*int64(half), 4)
	if n == 0 {
		return nil
	}
	c := o.begin(kRoPE).ptr("x", x).ptr("cos", cos).ptr("sin", sin).ptr("y", y).i32("rows", rows).i32("heads", heads).i32("half", half).flag("inverse", inverse).flag("accumulate", accumulate)
	return o.launch(c, o.vecStrided(n/2), threads)
}

// SwiGLU computes out = silu(gate)·up over n elements, silu(g) = g·σ(g).
func (o *Ops) SwiGLU(gate, up, out gpu.Buffer, n int64) error {
	need("SwiGLU", "gate", gate, n, o.es())
	need("SwiGLU", "up", up, n, o.es())
	need("SwiGLU", "out", out, n, o.es())
	if n == 0 {
		return nil
	}
	c := o.begin(kSwiGLU).ptr("gate", gate).ptr("up", up).ptr("out", out).i64("n", n)
	return o.launch(c, o.vecStrided(n), threads)
}

// SwiGLUBackward computes dgate = dout·up·σ(g)·(1 + g·(1−σ(g))) and
// dup = dout·silu(g), adding to them with accumulate; either may be null.
func (o *Ops) SwiGLUBackward(gate, up, dout, dgate, dup gpu.Buffer, n int64, accumulate bool) error {
	need("SwiGLUBackward", "gate", gate, n, o.es())
	need("SwiGLUBackward", "up", up, n, o.es())
	need("SwiGLUBackward", "dout", dout, n, o.es())
	optional("SwiGLUBackward", "dgate", dgate, n, o.es())
	optional("SwiGLUBackward", "dup", dup, n, o.es())
	if n == 0 || dgate.Ptr == 0 && dup.Ptr == 0 {
		return nil
	}
	c := o.begin(kSwiGLUBwd).ptr("gate", gate).ptr("up", up).ptr("dout", dout).ptr("dgate", dgate).ptr("dup", dup).i64("n", n).flag("accumulate", accumulate)
	return o.launch(c, o.vecStrided(n), threads)
}

// SwiGLUPacked computes out[r,c] = silu(y2[r,c])·y2[r,cols+c] for y2
// [rows, 2·cols] and out [rows, cols].
func (o *Ops) SwiGLUPacked(y2, out gpu.Buffer, rows int64, cols int) error {
	n := rows * int64(cols)
	need("SwiGLUPacked", "y2", y2, 2*n, o.es())
	need("SwiGLUPacked", "out", out, n, o.es())
	if n == 0 {
		return nil
	}
	c := o.begin(kSwiGLUPacked).ptr("y2", y2).ptr("out", out).i64("rows", rows).i32("cols", cols)
	return o.launch(c, o.vecStrided(n), threads)
}

// SwiGLUPackedBackward computes SwiGLUPacked's gradients for dout
// [rows, cols] into dy2 [rows, 2·cols] (dgate then dup in each row),
// adding to dy2 with accumulate; dy2 may be y2 itself without accumulate.
func (o *Ops) SwiGLUPackedBackward(y2, dout, dy2 gpu.Buffer, rows int64, cols int, accumulate bool) error {
	n := rows * int64(cols)
	need("SwiGLUPackedBackward", "y2", y2, 2*n, o.es())
	need("SwiGLUPackedBackward", "dout", dout, n, o.es())
	need("SwiGLUPackedBackward", "dy2", dy2, 2*n, o.es())
	if n == 0 {
		return nil
	}
	c := o.begin(kSwiGLUPackedBwd).ptr("y2", y2).ptr("dout", dout).ptr("dy2", dy2).i64("rows", rows).i32("cols", cols).flag("accumulate", accumulate)
	return o.launch(c, o.vecStrided(n), threads)
}
