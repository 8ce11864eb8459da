package tensorcuda

import (
	"fmt"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/gpu"
)

// QuantizeRowsE4M3 writes one float32 scale per row of x (storage dtype,
// rows×cols) into scales, scales[r] = max_j |x[r][j]|/448 (1 for a row of
// zeros, NaNs not counted), and the OCP FP8 E4M3 codes of x[r][j]/scales[r]
// into codes (rows×cols bytes; nearest even, saturating at ±448): the
// activation side of gpu.GemmFP8 with per-token scales, and on the device
// what quant.RowScales and quant.QuantizeRows compute. One block per row.
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
// per-token and per-channel scales (gpu.GemmFP8, ScaleRowsCols) writes y
// (rows×w.Out, storage dtype; y is c or does not overlap it). w.In must be
// a multiple of 16 and a row of y a multiple of 16 bytes.
func (o *Ops) LinearFP8(x gpu.Buffer, rows int, w FP8Weight, xq, xs gpu.Buffer, beta float32, c, y gpu.Buffer) error {
	need("LinearFP8", "W codes", w.Codes, int64(w.Out)*int64(w.In), 1)
	need("LinearFP8", "W scales", w.Scales, int64(w.Out), 4)
	need("LinearFP8", "y", y, int64(rows)*int64(w.Out), o.es())
	if beta != 0 {
		need("LinearFP8", "C", c, int64(rows)*int64(w.Out), o.es())
	}
	if rows == 0 {
		return nil
	}
	if err := o.QuantizeRowsE4M3(x, rows, w.In, xq, xs); err != nil {
		return err
	}
	spec := gpu.GemmSpec{M: rows, N: w.Out, K: w.In, TransB: true, In: dtype.F8E4M3, Out: o.dt, Scale: gpu.ScaleRowsCols}
	return o.run.gemmFP8(spec, 1, xq, xs, w.Codes, w.Scales, beta, c, y)
}
