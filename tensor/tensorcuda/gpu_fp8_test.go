package tensorcuda

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/tensor/quant"
)

// TestGPUQuantizeRowsE4M3 compares op_quant_rows_e4m3 with quant.RowScales
// and quant.QuantizeRows on the same stored values, bit for bit (scales and
// codes): rows whose magnitudes span six decades (subnormal codes
// included), a row of zeros, Qwen3-8B's widths (4096, 12288), an odd width
// and a single column.
func TestGPUQuantizeRowsE4M3(t *testing.T) {
	forDTypes(t, func(e *env) {
		for _, sh := range [][2]int{{16, 4096}, {3, 100}, {128, 12288}, {7, 1}} {
			rows, cols := sh[0], sh[1]
			vals := make([]float64, rows*cols)
			for r := range rows {
				mag := math.Pow(10, e.r.Float64()*6-3)
				for j := range cols {
					if r != 1 { // row 1 stays zeros
						vals[r*cols+j] = e.r.NormFloat64() * mag
					}
				}
			}
			x, xv := e.store(vals)
			xf := make([]float32, len(xv))
			for i, v := range xv {
				xf[i] = float32(v)
			}
			wantS := quant.RowScales(xf, rows, cols)
			wantQ := make([]uint8, len(xf))
			quant.QuantizeRows(wantQ, xf, rows, cols, wantS)

			codes := e.alloc(int64(rows*cols), gputest.Poison)
			scales := e.outF32(rows)
			e.check(e.o.QuantizeRowsE4M3(x, rows, cols, codes, scales))
			gotQ := make([]uint8, rows*cols)
			e.check(gpu.Download(e.d, gotQ, codes))
			gotS := make([]float32, rows)
			e.check(gpu.Download(e.d, gotS, scales))
			name := fmt.Sprintf("rows%d_cols%d", rows, cols)
			if !slices.Equal(gotS, wantS) {
				e.t.Errorf("QuantizeRowsE4M3 %s scales: got %v, want %v", name, gotS[:min(4, rows)], wantS[:min(4, rows)])
			}
			bad := 0
			for i := range gotQ {
				if gotQ[i] != wantQ[i] {
					if bad < 3 {
						e.t.Errorf("QuantizeRowsE4M3 %s code [%d][%d] of %g: %#02x, want %#02x", name, i/cols, i%cols, xf[i], gotQ[i], wantQ[i])
					}
					bad++
				}
			}
			if bad > 0 {
				e.t.Errorf("QuantizeRowsE4M3 %s: %d of %d codes differ", name, bad, len(gotQ))
			}
		}
	})
}
