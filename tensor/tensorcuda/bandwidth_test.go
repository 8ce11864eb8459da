package tensorcuda

import (
	"fmt"
	"testing"
	"time"

	"dflash/gpu"
	"dflash/internal/checkreport"
)

// peakGBs is the H200's HBM3e bandwidth, the yardstick of the table.
const peakGBs = 4000

// TestGPUOpsBandwidth times every kernel at a training-sized shape (Qwen3-8B
// widths, 16384 tokens) and reports GB/s against the bytes the op must move
// at least (each input read once, each output written once; read-modify-write
// outputs twice). It checks nothing but that the launches succeed.
//
// The "step:" rows are shapes of the Qwen3-8B training step (sequence 3072,
// batch 4) that the step profile showed far from the bandwidth, with the
// time each took there (bf16) and the time predicted for the kernels that
// replaced them, bandwidth-bound at ~3.3 TB/s (bytes / 3.3e12):
//
//	op_copy2d 1×50331648 (a flat copy, 201 MB moved)  0.22 ms → 61 us
//	op_transpose12 [4,3072,32,128] (201 MB)           0.33 ms → 61 us
//	the same transpose accumulating (302 MB)                  → 92 us
//	op_rmsnorm_fwd dim 128, 393216 rows (203 MB)      0.59 ms → 61 us (op_rmsnorm_fwd_small)
//	op_rmsnorm_bwd_dx dim 128, 1048576 rows (1078 MB)  2.9 ms → 327 us (op_rmsnorm_bwd_dx_small)
//
// "RMSNorm 65536x1024" times the _small kernel at its largest dim
// (smallNormDim) beside the one-block-per-row kernel at 4096.
func TestGPUOpsBandwidth(t *testing.T) {
	forDTypes(t, func(e *env) {
		es := int64(e.dt.Size())
		const (
			tokens, hidden, inter = 16384, 4096, 12288
			heads, headDim        = 32, 128
			vocab, xentRows       = 151936, 512
			tableRows             = 32768
			params                = 1 << 28
			seq, batch            = 3072, 4
			flat                  = batch * seq * heads * headDim // one [4,3072,32,128] activation
		)
		ids := make([]int32, tokens)
		for i := range ids {
			ids[i] = int32(e.r.IntN(tableRows))
		}
		idb := e.ints(ids)
		nh := int64(tokens) * hidden
		ni := int64(tokens) * inter
		a := func(elems, size int64) gpu.Buffer { return e.alloc(elems*size, 0) }
		table, x, y, dy := a(tableRows*hidden, es), a(nh, es), a(nh, es), a(nh, es)
		dtable, w, dw := a(tableRows*hidden, 4), a(hidden, es), a(hidden, 4)
		rstd, scratch := a(tokens, 4), a(ColumnScratch(tokens, hidden)/4, 4)
		const qkRows, qkGradRows = flat / headDim, 1 << 20 // the step's QK-norm rows
		qkRstd := a(qkGradRows, 4)
		g, u, o, dg, du := a(ni, es), a(ni, es), a(ni, es), a(ni, es), a(ni, es)
		codes, scales := a(ni, 1), a(tokens, 4) // the E4M3 producers' rows
		y2 := a(2*ni, es)                       // gate and up side by side, [16384, 2·12288]
		cs, sn := a(tokens*headDim/2, 4), a(tokens*headDim/2, 4)
		logits, tg, sc := a(xentRows*vocab, es), e.ints(ids[:xentRows]), a(xentRows, 4)
		loss, am := a(xentRows, 4), a(xentRows, 4)
		pp, pg, pm, pv, p16, table3 := a(params, 4), a(params, 4), a(params, 4), a(params, 4), a(params, 2), a(3, 8)
		l, err := NewAdamWLayout([]AdamWSegment{{0, params, true}}, params)
		e.check(err)
		e.check(gpu.Upload(e.d, table3, l.Table))
		step := AdamWStep{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, StepSize: 1e-3, BC2Sqrt: 0.2236, Shrink: 1 - 1e-6} // lr 1e-4, decay 0.01, step 1

		for _, c := range []struct {
			name  string
			bytes int64
			f     func() error
		}{
			{"Gather 16384x4096", 2*nh*es + 4*tokens, func() error { return e.o.Gather(table, tableRows, hidden, idb, tokens, y) }},
			{"ScatterAdd 16384x4096", nh*es + 2*nh*4, func() error { return e.o.ScatterAdd(dy, tokens, hidden, idb, dtable, tableRows) }},
			{"RMSNorm 16384x4096", 2 * nh * es, func() error { return e.o.RMSNorm(x, w, tokens, hidden, 1e-6, y, rstd) }},
			{"RMSNormBackward dx+dw 16384x4096", 4 * nh * es, func() error {
				return e.o.RMSNormBackward(x, w, rstd, dy, tokens, hidden, y, dw, scratch, true)
			}},
			{"RMSNormBackward dw 16384x4096", 2 * nh * es, func() error {
				return e.o.RMSNormBackward(x, w, rstd, dy, tokens, hidden, gpu.Buffer{}, dw, scratch, true)
			}},
			{"RMSNorm 65536x1024", 2 * nh * es, func() error { return e.o.RMSNorm(x, w, int(nh/1024), 1024, 1e-6, y, qkRstd) }},
			{"step: RMSNorm 393216x128", 2*flat*es + 4*qkRows, func() error {
				return e.o.RMSNorm(x, w, qkRows, headDim, 1e-6, y, qkRstd)
			}},
			{"step: RMSNormBackward dx 1048576x128", 4*qkGradRows*headDim*es + 4*qkGradRows, func() error {
				return e.o.RMSNormBackward(g, w, qkRstd, u, qkGradRows, headDim, dg, gpu.Buffer{}, gpu.Buffer{}, true)
			}},
			{"QuantizeRowsE4M3 16384x4096", nh*es + nh + 4*tokens, func() error { return e.o.QuantizeRowsE4M3(x, tokens, hidden, codes, scales) }},
			{"RMSNormE4M3 16384x4096", nh*es + nh + 8*tokens, func() error {
				return e.o.RMSNormE4M3(x, w, tokens, hidden, 1e-6, codes, scales, rstd, y)
			}},
			{"SwiGLUPackedE4M3 16384x2x12288", 2*ni*es + ni + 4*tokens, func() error {
				return e.o.SwiGLUPackedE4M3(y2, tokens, inter, codes, scales)
			}},
			{"RoPE 16384x32x128", 2*nh*es + 2*tokens*headDim/2*4, func() error {
				return e.o.RoPE(x, tokens, heads, headDim, cs, sn, y, false, false)
			}},
			{"SwiGLU 16384x12288", 3 * ni * es, func() error { return e.o.SwiGLU(g, u, o, ni) }},
			{"SwiGLUBackward 16384x12288", 7 * ni * es, func() error { return e.o.SwiGLUBackward(g, u, o, dg, du, ni, true) }},
			{"SwiGLUPacked 16384x2x12288", 3 * ni * es, func() error { return e.o.SwiGLUPacked(y2, o, int64(tokens), int(inter)) }},
			{"SwiGLUPackedBackward in place 16384x2x12288", 5 * ni * es, func() error {
				return e.o.SwiGLUPackedBackward(y2, o, y2, int64(tokens), int(inter), false)
			}},
			{"Axpy 16384x12288", 3 * ni * es, func() error { return e.o.Axpy(0.5, g, u, ni) }},
			{"Scale 16384x12288", 2 * ni * es, func() error { return e.o.Scale(1, g, ni) }},
			{"AddRows 16384x4096", 2 * nh * es, func() error { return e.o.AddRows(y, tokens, hidden, w) }},
			{"SumRows 16384x4096", nh * es, func() error { return e.o.SumRows(y, tokens, hidden, dw, scratch) }},
			{"Copy2D 16384x4096 of 12288", 2 * nh * es, func() error {
				return e.o.Copy2D(tokens, hidden, g, inter, 4096, y, hidden, 0, false)
			}},
			{"Transpose12 4x4096x32x128", 2 * nh * es, func() error { return e.o.Transpose12(4, 4096, heads, headDim, x, y, false) }},
			{"step: Copy2D 1x50331648", 2 * flat * es, func() error { return e.o.Copy2D(1, flat, x, flat, 0, y, flat, 0, false) }},
			{"step: Transpose12 4x3072x32x128", 2 * flat * es, func() error {
				return e.o.Transpose12(batch, seq, heads, headDim, x, y, false)
			}},
			{"step: Transpose12 4x32x3072x128 accumulate", 3 * flat * es, func() error {
				return e.o.Transpose12(batch, heads, seq, headDim, x, y, true)
			}},
			{"step: NormRoPE 4x3072x32x128", 2*flat*es + 2*batch*seq*headDim/2*4 + 4*qkRows, func() error {
				return e.o.NormRoPE(x, w, batch, seq, heads, headDim, heads*headDim, 1e-6, cs, sn, y, qkRstd)
			}},
			{"step: NormRoPEBackward dx+dw 4x3072x32x128", 6*flat*es + 4*batch*seq*headDim/2*4 + 8*qkRows, func() error {
				return e.o.NormRoPEBackward(x, w, qkRstd, cs, sn, dy, batch, seq, heads, headDim, heads*headDim, y, dw, scratch, true)
			}},
			{"step: Add 1x50331648", 3 * flat * es, func() error { return e.o.Add(x, dy, y, flat) }},
			{"SoftmaxXent 512x151936", 2 * xentRows * vocab * es, func() error {
				return e.o.SoftmaxXent(logits, xentRows, vocab, tg, sc, loss, am)
			}},
			{"ArgmaxRows 16x151936", 16*vocab*es + 16*4, func() error { return e.o.ArgmaxRows(logits, 16, vocab, am) }},
			{"ArgmaxRows 512x151936", xentRows*vocab*es + xentRows*4, func() error { return e.o.ArgmaxRows(logits, xentRows, vocab, am) }},
			{"AdamW 2^28 params (+bf16 copy)", params * 30, func() error { return e.o.AdamW(l, table3, pp, pg, pm, pv, p16, step) }},
		} {
			dt := e.time(c.f)
			gbs := float64(c.bytes) / dt.Seconds() / 1e9
			detail := fmt.Sprintf("%9.1f us %7.0f GB/s %5.1f%% of %d GB/s (%d MB)", float64(dt.Nanoseconds())/1e3, gbs, 100*gbs/peakGBs, peakGBs, c.bytes>>20)
			checkreport.Write(e.t, "tensorcuda-bw", e.dt.String()+" "+c.name, true, detail,
				map[string]float64{"us": float64(dt.Nanoseconds()) / 1e3, "gbps": gbs, "pct_peak": 100 * gbs / peakGBs})
		}
	})
}

// time returns the median duration of f (gpu.Device.Time: events around
// each repetition after warm-up launches).
func (e *env) time(f func() error) time.Duration {
	tm, err := e.d.Time(3, 20, f)
	e.check(err)
	return tm.Median()
}
