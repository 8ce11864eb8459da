package tensorcuda

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/tensor/quant"
)

// TestGPUQuantizeRowsE4M3 compares op_quant_rows_e4m3 with quant.RowScales
// and quant.QuantizeRows on the same stored values, bit for bit (scales and
// codes): rows whose magnitudes span six decades (subnormal codes
// included), a row of zeros, Qwen3-8B's widths (4096, 12288), an odd width
// and a single column; rows held in registers (op_row_fits) and rows read
// twice (larger than rowVecs vectors a thread, or not whole vectors).
func TestGPUQuantizeRowsE4M3(t *testing.T) {
	forDTypes(t, func(e *env) {
		for _, sh := range [][2]int{{16, 4096}, {3, 100}, {128, 12288}, {7, 1}, {2, 20480}, {3, 4100}} {
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
			checkQuantize(e, fmt.Sprintf("rows%d_cols%d", rows, cols), rows, cols, vals)
		}
	})
}

// TestGPUE4M3Ties checks the conversion itself (the conversion instruction
// of the rows held in registers, op_e4m3 of the others) where rounding
// decides: rows whose largest magnitude is 448 (scale 1, so the codes are
// the values' own) filled with every E4M3 value, the midpoints between
// neighbours (ties to even), a storage step either side of them, the
// subnormals' and zero's, their negatives and NaNs of both signs.
func TestGPUE4M3Ties(t *testing.T) {
	forDTypes(t, func(e *env) {
		var set []float64
		for c := range uint8(0x7f) { // 0x7f is NaN
			v := float64(dtype.F8E4M3ToFloat32(c))
			set = append(set, v)
			if c < 0x7e {
				mid := (v + float64(dtype.F8E4M3ToFloat32(c+1))) / 2
				set = append(set, mid, math.Nextafter(float64(float32(mid)), 0), mid*(1+1.0/128), mid*(1-1.0/128))
			}
		}
		for _, v := range slices.Clone(set) {
			set = append(set, -v)
		}
		set = append(set, math.NaN(), math.Copysign(math.NaN(), -1))
		for _, cols := range []int{4096, 20480} {
			rows := 2
			vals := make([]float64, rows*cols)
			for i := range vals {
				vals[i] = set[i%len(set)]
				if i%cols == 0 {
					vals[i] = 448
				}
			}
			checkQuantize(e, fmt.Sprintf("ties cols%d", cols), rows, cols, vals)
		}
	})
}

// checkQuantize runs QuantizeRowsE4M3 on vals (rows×cols) as e stores them
// and compares scales and codes with quant.RowScales and quant.QuantizeRows
// of the stored values, bit for bit.
func checkQuantize(e *env, name string, rows, cols int, vals []float64) {
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

// TestGPULinearFP8 runs LinearFP8 (device quantization of x, then the
// cuBLASLt FP8 product with per-token and per-channel scales) and compares
// it with quant.GemmRef of x quantized on the host (bit-identical to the
// device's, TestGPUQuantizeRowsE4M3) and W quantized at "load", plus
// beta·C: within the rounding of the storage dtype and a 2^-12 share of
// Σ|x·w| for the fp32 accumulation; with fast accumulation
// (DFLASH_FP8_FAST_ACCUM) a 2^-13 share per 32 of K, the error of partial
// sums kept in 13 bits or more, one rounding per tensor-core step. Shapes of
// Qwen3-8B's projections.
func TestGPULinearFP8(t *testing.T) {
	forDTypes(t, func(e *env) {
		fast0 := e.o.fp8Fast
		defer func() { e.o.fp8Fast = fast0 }()
		for _, c := range []struct {
			rows, in, out int
			fast          bool
		}{{5, 64, 48, false}, {16, 12288, 4096, false}, {128, 4096, 4096, false}, {5, 64, 48, true}, {16, 12288, 4096, true}, {128, 4096, 4096, true}} {
			rows, in, out := c.rows, c.in, c.out
			e.o.fp8Fast = c.fast
			name := fmt.Sprintf("rows%d_in%d_out%d_fast%v", rows, in, out, c.fast)
			accEps := 1.0 / (1 << 12)
			if c.fast {
				accEps = float64((in+31)/32) / (1 << 13)
			}
			x, xv := e.store(e.normal(rows*in, 1))
			wf := make([]float32, out*in)
			for i := range wf {
				wf[i] = float32(e.r.NormFloat64() * 0.02)
			}
			ws := quant.RowScales(wf, out, in)
			wq := make([]uint8, len(wf))
			quant.QuantizeRows(wq, wf, out, in, ws)
			w := FP8Weight{Out: out, In: in, Codes: e.alloc(int64(len(wq)), gputest.Poison), Scales: e.outF32(out)}
			e.check(gpu.Upload(e.d, w.Codes, wq))
			e.check(gpu.Upload(e.d, w.Scales, ws))
			c, cv := e.store(e.normal(rows*out, 1))
			xq, xs := e.alloc(int64(rows*in), gputest.Poison), e.outF32(rows)
			const beta = 0.5
			e.check(e.o.LinearFP8(x, rows, w, xq, xs, beta, c, c))
			got := e.load(c, rows*out)

			xf := make([]float32, len(xv))
			for i, v := range xv {
				xf[i] = float32(v)
			}
			xsv := quant.RowScales(xf, rows, in)
			xqv := make([]uint8, len(xf))
			quant.QuantizeRows(xqv, xf, rows, in, xsv)
			ref := quant.GemmRef(xqv, xsv, wq, ws, rows, out, in)
			abs := func(q []uint8) []uint8 {
				a := make([]uint8, len(q))
				for i, v := range q {
					a[i] = v & 0x7f
				}
				return a
			}
			mag := quant.GemmRef(abs(xqv), xsv, abs(wq), ws, rows, out, in)
			outEps := 1.0 / 256
			if e.dt.Size() == 4 {
				outEps = 1.0 / (1 << 23)
			}
			bad, worst := 0, 0.0
			for i := range got {
				want := ref[i] + beta*cv[i]
				tol := outEps*math.Abs(want) + mag[i]*accEps + math.Abs(beta*cv[i])/(1<<12) + 1e-30
				d := math.Abs(got[i] - want)
				worst = math.Max(worst, d/tol)
				if d > tol {
					if bad < 3 {
						e.t.Errorf("LinearFP8 %s y[%d][%d] = %g, want %g (tol %.3g)", name, i/out, i%out, got[i], want, tol)
					}
					bad++
				}
			}
			e.t.Logf("LinearFP8 %s: worst error / tolerance %.4f, %d over", name, worst, bad)
		}
	})
}

// TestGPUFusedE4M3 compares the ops that write E4M3 rows themselves with
// the op then QuantizeRowsE4M3 (each checked against the host elsewhere),
// bit for bit in codes, scales and RMSNorm's rstd: RMSNormE4M3 one block a
// row (Qwen3-8B's 4096 and a vector width 2056 held in registers, a scalar
// width 1030 and a row of 20480, past rowVecs vectors a thread, read twice)
// and through its stage (256, the small-row kernel), SwiGLUPackedE4M3 at
// the 8B's 12288, at 20480 and at widths of scalar tails.
func TestGPUFusedE4M3(t *testing.T) {
	forDTypes(t, func(e *env) {
		same := func(name string, rows, cols int, codes, scales, wantCodes, wantScales gpu.Buffer) {
			got, want := make([]uint8, rows*cols), make([]uint8, rows*cols)
			e.check(gpu.Download(e.d, got, codes))
			e.check(gpu.Download(e.d, want, wantCodes))
			if !slices.Equal(e.loadF32(scales, rows), e.loadF32(wantScales, rows)) {
				e.t.Errorf("%s: scales %v, want %v", name, e.loadF32(scales, min(rows, 4)), e.loadF32(wantScales, min(rows, 4)))
			}
			bad := 0
			for i := range got {
				if got[i] != want[i] {
					if bad < 3 {
						e.t.Errorf("%s code [%d][%d]: %#02x, want %#02x", name, i/cols, i%cols, got[i], want[i])
					}
					bad++
				}
			}
			if bad > 0 {
				e.t.Errorf("%s: %d of %d codes differ", name, bad, len(got))
			}
		}
		for _, sh := range [][2]int{{16, 4096}, {5, 2056}, {3, 1030}, {4, 256}, {2, 20480}, {2, 81920}} {
			rows, dim := sh[0], sh[1]
			name := fmt.Sprintf("RMSNormE4M3 rows%d_dim%d", rows, dim)
			x, _ := e.store(e.normal(rows*dim, 2))
			w, _ := e.store(e.normal(dim, 1))
			y, rstd := e.out(rows*dim), e.outF32(rows)
			e.check(e.o.RMSNorm(x, w, rows, dim, 1e-6, y, rstd))
			wantQ, wantS := e.alloc(int64(rows*dim), gputest.Poison), e.outF32(rows)
			e.check(e.o.QuantizeRowsE4M3(y, rows, dim, wantQ, wantS))
			var stage gpu.Buffer
			if !e.o.FusesNorm(dim) {
				stage = e.out(rows * dim)
			}
			q, s, rs := e.alloc(int64(rows*dim), gputest.Poison), e.outF32(rows), e.outF32(rows)
			e.check(e.o.RMSNormE4M3(x, w, rows, dim, 1e-6, q, s, rs, stage))
			same(name, rows, dim, q, s, wantQ, wantS)
			if !slices.Equal(e.loadF32(rs, rows), e.loadF32(rstd, rows)) {
				e.t.Errorf("%s: rstd %v, want RMSNorm's %v", name, e.loadF32(rs, min(rows, 4)), e.loadF32(rstd, min(rows, 4)))
			}
		}
		for _, sh := range [][2]int{{8, 12288}, {3, 100}, {5, 4100}, {2, 20480}, {2, 81920}} {
			rows, cols := sh[0], sh[1]
			name := fmt.Sprintf("SwiGLUPackedE4M3 rows%d_cols%d", rows, cols)
			y2, _ := e.store(e.normal(rows*2*cols, 3))
			out := e.out(rows * cols)
			e.check(e.o.SwiGLUPacked(y2, out, int64(rows), cols))
			wantQ, wantS := e.alloc(int64(rows*cols), gputest.Poison), e.outF32(rows)
			e.check(e.o.QuantizeRowsE4M3(out, rows, cols, wantQ, wantS))
			q, s := e.alloc(int64(rows*cols), gputest.Poison), e.outF32(rows)
			e.check(e.o.SwiGLUPackedE4M3(y2, rows, cols, q, s))
			same(name, rows, cols, q, s, wantQ, wantS)
		}
	})
}
