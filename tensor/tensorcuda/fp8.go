package tensorcuda

import (
	"fmt"

	"dflash/cuda"
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
