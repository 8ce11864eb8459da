package tensorcuda

import (
	"fmt"

	"dflash/cuda"
	"dflash/gpu"
)

// ArgmaxRows writes out[r] (int32) = the lowest index of the largest
// element of row r of x (storage dtype, rows×cols), a NaN counting as the
// largest: tensor.Argmax of each row. One block per row.
func (o *Ops) ArgmaxRows(x gpu.Buffer, rows, cols int, out gpu.Buffer) error {
	need("ArgmaxRows", "x", x, int64(rows)*int64(cols), o.es())
	need("ArgmaxRows", "out", out, int64(rows), 4)
	if rows == 0 {
		return nil
	}
	if cols <= 0 {
		panic(fmt.Sprintf("tensorcuda: ArgmaxRows: %d columns", cols))
	}
	c := o.begin(kArgmax).ptr("x", x).i32("rows", rows).i32("cols", cols).ptr("out", out)
	return o.launch(c, cuda.Dim(uint32(rows), 1, 1), argmaxThreads)
}
