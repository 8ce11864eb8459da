package tensorcuda

import (
	"context"
	"fmt"
	"testing"

	"dflash/dtype"
	"dflash/flex"
	"dflash/gpu"
	"dflash/tensor"
)

// onWorker runs a Backend for a caller on another goroutine (the conformance
// suite's subtests): every call, Like included, runs on the device's worker
// through Worker.Run. A call that panics fails t with the panic and returns
// zero results, so one unsupported case does not end the test binary. It is
// for tests only: training code runs on the worker and calls the Backend.
type onWorker struct {
	w *gpu.Worker
	b *Backend
	t *testing.T
}

// wStore is a Buf handed out by onWorker: its Like runs on the worker.
type wStore struct {
	Buf
	p *onWorker
}

func (s wStore) Slice(lo, hi int) tensor.Storage[float32] {
	return wStore{s.Buf.Slice(lo, hi).(Buf), s.p}
}

func (s wStore) Like(n int) tensor.Storage[float32] {
	var out tensor.Storage[float32]
	s.p.do("Like", func() { out = s.Buf.Like(n) })
	return s.p.wrap(out)
}

func (s wStore) LikeOut(n int) tensor.Storage[float32] {
	var out tensor.Storage[float32]
	s.p.do("LikeOut", func() { out = s.Buf.LikeOut(n) })
	return s.p.wrap(out)
}

// do runs f on the worker, failing the test with what f panics with.
func (p *onWorker) do(op string, f func()) bool {
	err := p.w.Run(func(*gpu.Device) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%v", r)
			}
		}()
		f()
		return nil
	})
	if err != nil {
		p.t.Errorf("%s on %s: %v", op, p.b.Name(), err)
		return false
	}
	return true
}

func (p *onWorker) wrap(s tensor.Storage[float32]) tensor.Storage[float32] {
	if b, ok := s.(Buf); ok {
		return wStore{b, p}
	}
	return s
}

func un(s tensor.Storage[float32]) tensor.Storage[float32] {
	if w, ok := s.(wStore); ok {
		return w.Buf
	}
	return s
}

func (p *onWorker) Name() string { return p.b.Name() }

func (p *onWorker) Alloc(n int) (s tensor.Storage[float32]) {
	p.do("Alloc", func() { s = p.b.Alloc(n) })
	return p.wrap(s)
}

func (p *onWorker) AllocOut(n int) (s tensor.Storage[float32]) {
	p.do("AllocOut", func() { s = p.b.AllocOut(n) })
	return p.wrap(s)
}

func (p *onWorker) AllocStatOut(n int) (s tensor.Storage[float32]) {
	p.do("AllocStatOut", func() { s = p.b.AllocStatOut(n) })
	return p.wrap(s)
}

func (p *onWorker) AllocStat(n int) (s tensor.Storage[float32]) {
	p.do("AllocStat", func() { s = p.b.AllocStat(n) })
	return p.wrap(s)
}

func (p *onWorker) Upload(x []float32, stat bool) (s tensor.Storage[float32]) {
	p.do("Upload", func() { s = p.b.Upload(x, stat) })
	return p.wrap(s)
}

func (p *onWorker) KeepStat(x []float32) (s tensor.Storage[float32]) {
	p.do("KeepStat", func() { s = p.b.KeepStat(x) })
	return p.wrap(s)
}

func (p *onWorker) Download(s tensor.Storage[float32], dst []float32) {
	p.do("Download", func() { p.b.Download(un(s), dst) })
}

func (p *onWorker) AllocHost(n int) (h []float32, err error) {
	p.do("AllocHost", func() { h, err = p.b.AllocHost(n) })
	return h, err
}

func (p *onWorker) FreeHost(h []float32) (err error) {
	p.do("FreeHost", func() { err = p.b.FreeHost(h) })
	return err
}

func (p *onWorker) AllocInts(n int) (s tensor.Ints) {
	p.do("AllocInts", func() { s = p.b.AllocInts(n) })
	return s
}

func (p *onWorker) UploadInts(x []int32) (s tensor.Ints) {
	p.do("UploadInts", func() { s = p.b.UploadInts(x) })
	return s
}

func (p *onWorker) DownloadInts(s tensor.Ints, dst []int32) {
	p.do("DownloadInts", func() { p.b.DownloadInts(s, dst) })
}

func (p *onWorker) Fill(s tensor.Storage[float32], v float64) {
	p.do("Fill", func() { p.b.Fill(un(s), v) })
}

func (p *onWorker) NewMask(prog *flex.MaskProgram, args *flex.Args, d flex.Dims) (m tensor.Mask, err error) {
	p.do("NewMask", func() { m, err = p.b.NewMask(prog, args, d) })
	return m, err
}

func (p *onWorker) Prepare(ctx context.Context, uses []tensor.AttentionUse) (err error) {
	p.do("Prepare", func() { err = p.b.Prepare(ctx, uses) })
	return err
}

func (p *onWorker) Gemm(transA, transB bool, m, n, k int, alpha float32, a tensor.Storage[float32], lda int, b tensor.Storage[float32], ldb int, beta float32, c tensor.Storage[float32], ldc int) {
	p.do("Gemm", func() { p.b.Gemm(transA, transB, m, n, k, alpha, un(a), lda, un(b), ldb, beta, un(c), ldc) })
}

func (p *onWorker) GemmAdd(transA, transB bool, m, n, k int, alpha float32, a tensor.Storage[float32], lda int, b tensor.Storage[float32], ldb int, c, d tensor.Storage[float32], ldc int) {
	p.do("GemmAdd", func() { p.b.GemmAdd(transA, transB, m, n, k, alpha, un(a), lda, un(b), ldb, un(c), un(d), ldc) })
}

func (p *onWorker) Add(a, b, out tensor.Storage[float32]) {
	p.do("Add", func() { p.b.Add(un(a), un(b), un(out)) })
}

func (p *onWorker) Axpy(alpha float32, x, y tensor.Storage[float32]) {
	p.do("Axpy", func() { p.b.Axpy(alpha, un(x), un(y)) })
}

func (p *onWorker) AxpyBy(alpha float32, s, x, y tensor.Storage[float32]) {
	p.do("AxpyBy", func() { p.b.AxpyBy(alpha, un(s), un(x), un(y)) })
}

func (p *onWorker) Scale(alpha float32, x tensor.Storage[float32]) {
	p.do("Scale", func() { p.b.Scale(alpha, un(x)) })
}

func (p *onWorker) AddRows(y, v tensor.Storage[float32]) {
	p.do("AddRows", func() { p.b.AddRows(un(y), un(v)) })
}
func (p *onWorker) SumRows(y, v tensor.Storage[float32]) {
	p.do("SumRows", func() { p.b.SumRows(un(y), un(v)) })
}

func (p *onWorker) Copy2D(rows, cols int, src tensor.Storage[float32], srcStride, srcOff int, dst tensor.Storage[float32], dstStride, dstOff int, accumulate bool) {
	p.do("Copy2D", func() { p.b.Copy2D(rows, cols, un(src), srcStride, srcOff, un(dst), dstStride, dstOff, accumulate) })
}

func (p *onWorker) AllocKeep(n int) (s tensor.Storage[float32]) {
	p.do("AllocKeep", func() { s = p.b.AllocKeep(n) })
	return p.wrap(s)
}

func (p *onWorker) FreeKeep(s tensor.Storage[float32]) {
	p.do("FreeKeep", func() { p.b.FreeKeep(un(s)) })
}

func (p *onWorker) CacheRows(src tensor.Storage[float32], heads, n, headDim int, headsInner bool, cache tensor.Storage[float32], maxLen int, at tensor.CacheAt) {
	p.do("CacheRows", func() { p.b.CacheRows(un(src), heads, n, headDim, headsInner, un(cache), maxLen, at) })
}

func (p *onWorker) DecodeAttention(q tensor.Storage[float32], heads, n, headDim int, k, v tensor.Storage[float32], kvHeads, maxLen int, at tensor.CacheAt, causal bool, scale float64, out tensor.Storage[float32]) {
	p.do("DecodeAttention", func() {
		p.b.DecodeAttention(un(q), heads, n, headDim, un(k), un(v), kvHeads, maxLen, at, causal, scale, un(out))
	})
}

func (p *onWorker) Transpose12(a, b, c, d int, src, dst tensor.Storage[float32], accumulate bool) {
	p.do("Transpose12", func() { p.b.Transpose12(a, b, c, d, un(src), un(dst), accumulate) })
}

func (p *onWorker) Gather(table tensor.Storage[float32], dim int, ids tensor.Ints, out tensor.Storage[float32]) {
	p.do("Gather", func() { p.b.Gather(un(table), dim, ids, un(out)) })
}

func (p *onWorker) ScatterAdd(dout tensor.Storage[float32], dim int, ids tensor.Ints, dtable tensor.Storage[float32]) {
	p.do("ScatterAdd", func() { p.b.ScatterAdd(un(dout), dim, ids, un(dtable)) })
}

func (p *onWorker) RMSNorm(x, w tensor.Storage[float32], dim int, eps float64, y, rstd tensor.Storage[float32]) {
	p.do("RMSNorm", func() { p.b.RMSNorm(un(x), un(w), dim, eps, un(y), un(rstd)) })
}

func (p *onWorker) RMSNormBackward(x, w, rstd, dy tensor.Storage[float32], dim int, dx, dw tensor.Storage[float32], accumulate bool) {
	p.do("RMSNormBackward", func() { p.b.RMSNormBackward(un(x), un(w), un(rstd), un(dy), dim, un(dx), un(dw), accumulate) })
}

func (p *onWorker) RoPE(x tensor.Storage[float32], heads, headDim int, cos, sin, y tensor.Storage[float32], inverse, accumulate bool) {
	p.do("RoPE", func() { p.b.RoPE(un(x), heads, headDim, un(cos), un(sin), un(y), inverse, accumulate) })
}

func (p *onWorker) NormRoPE(x, w tensor.Storage[float32], batch, length, heads, headDim, xStride int, eps float64, cos, sin, y, rstd tensor.Storage[float32]) {
	p.do("NormRoPE", func() {
		p.b.NormRoPE(un(x), un(w), batch, length, heads, headDim, xStride, eps, un(cos), un(sin), un(y), un(rstd))
	})
}

func (p *onWorker) NormRoPEBackward(x, w, rstd, dy tensor.Storage[float32], batch, length, heads, headDim, xStride int, cos, sin, dx, dw tensor.Storage[float32], accumulate bool) {
	p.do("NormRoPEBackward", func() {
		p.b.NormRoPEBackward(un(x), un(w), un(rstd), un(dy), batch, length, heads, headDim, xStride, un(cos), un(sin), un(dx), un(dw), accumulate)
	})
}

func (p *onWorker) SwiGLU(gate, up, out tensor.Storage[float32]) {
	p.do("SwiGLU", func() { p.b.SwiGLU(un(gate), un(up), un(out)) })
}

func (p *onWorker) SwiGLUBackward(gate, up, dout, dgate, dup tensor.Storage[float32], accumulate bool) {
	p.do("SwiGLUBackward", func() { p.b.SwiGLUBackward(un(gate), un(up), un(dout), un(dgate), un(dup), accumulate) })
}

func (p *onWorker) SwiGLUPacked(y2 tensor.Storage[float32], cols int, out tensor.Storage[float32]) {
	p.do("SwiGLUPacked", func() { p.b.SwiGLUPacked(un(y2), cols, un(out)) })
}

func (p *onWorker) SwiGLUPackedBackward(y2, dout tensor.Storage[float32], cols int, dy2 tensor.Storage[float32], accumulate bool) {
	p.do("SwiGLUPackedBackward", func() { p.b.SwiGLUPackedBackward(un(y2), un(dout), cols, un(dy2), accumulate) })
}

func (p *onWorker) SoftmaxXent(logits tensor.Storage[float32], rows, vocab int, targets tensor.Ints, scale, loss tensor.Storage[float32], argmax tensor.Ints) {
	p.do("SoftmaxXent", func() { p.b.SoftmaxXent(un(logits), rows, vocab, targets, un(scale), un(loss), argmax) })
}

func (p *onWorker) ArgmaxRows(x tensor.Storage[float32], rows, cols int, out tensor.Ints) {
	p.do("ArgmaxRows", func() { p.b.ArgmaxRows(un(x), rows, cols, out) })
}

// Attention returns zero outputs of the right sizes when the call fails.
func (p *onWorker) Attention(d flex.Dims, q, k, v tensor.Storage[float32], m tensor.Mask, score *flex.ScoreProgram, scale float64) (out, lse tensor.Storage[float32]) {
	if !p.do("Attention", func() { out, lse = p.b.Attention(d, un(q), un(k), un(v), m, score, scale) }) {
		return p.Alloc(q.Len()), p.AllocStat(d.Batch * d.HeadsQ * d.LenQ)
	}
	return p.wrap(out), p.wrap(lse)
}

func (p *onWorker) AttentionBackward(d flex.Dims, q, k, v, out, lse, dout tensor.Storage[float32], m tensor.Mask, score *flex.ScoreProgram, scale float64, dq, dk, dv tensor.Storage[float32], accumulate bool) {
	p.do("AttentionBackward", func() {
		p.b.AttentionBackward(d, un(q), un(k), un(v), un(out), un(lse), un(dout), m, score, scale, un(dq), un(dk), un(dv), accumulate)
	})
}

func (p *onWorker) ResetStep() { p.do("ResetStep", p.b.ResetStep) }

func (p *onWorker) MarkStep() (m tensor.StepMark) {
	p.do("MarkStep", func() { m = p.b.MarkStep() })
	return m
}

func (p *onWorker) ReleaseStep(m tensor.StepMark) {
	p.do("ReleaseStep", func() { p.b.ReleaseStep(m) })
}

func (p *onWorker) FreeStep(s tensor.Storage[float32]) {
	p.do("FreeStep", func() { p.b.FreeStep(un(s)) })
}

// FreesStep returns false: the suite's tapes keep what they make, as on
// the CPU reference (the release of step memory has its own tests).
func (p *onWorker) FreesStep() bool { return false }

func (p *onWorker) XentChunk() int { return p.b.XentChunk() }

// Replay runs fn plainly: a region recorded on the worker would call back
// into onWorker from the worker itself.
func (p *onWorker) Replay(key any, fn func()) string {
	fn()
	return ""
}

func (p *onWorker) AllocParams(n int, master bool) (values, compute tensor.Storage[float32]) {
	p.do("AllocParams", func() { values, compute = p.b.AllocParams(n, master) })
	return p.wrap(values), p.wrap(compute)
}

func (p *onWorker) WriteParams(dst tensor.Storage[float32], host []float32) {
	p.do("WriteParams", func() { p.b.WriteParams(un(dst), host) })
}

func (p *onWorker) WriteParamBytes(dst tensor.Storage[float32], dt dtype.DType, raw []byte) {
	p.do("WriteParamBytes", func() { p.b.WriteParamBytes(un(dst), dt, raw) })
}

func (p *onWorker) HostParams() bool { return p.b.HostParams() }

// The optimizer's methods take an arena placed on the Backend itself (its
// storage, not onWorker's): they run on the worker.

func (p *onWorker) NewAdamState(a *tensor.Arena[float32], h tensor.AdamW, decay []bool) (s *tensor.AdamState[float32], err error) {
	p.do("NewAdamState", func() { s, err = p.b.NewAdamState(a, h, decay) })
	return s, err
}

func (p *onWorker) AdamWStep(a *tensor.Arena[float32], s *tensor.AdamState[float32], lr float64) {
	p.do("AdamWStep", func() { p.b.AdamWStep(a, s, lr) })
}

func (p *onWorker) WriteAdamState(s *tensor.AdamState[float32], m, v []float32) {
	p.do("WriteAdamState", func() { p.b.WriteAdamState(s, m, v) })
}

func (p *onWorker) SumSquares(s tensor.Storage[float32]) (sum float64) {
	p.do("SumSquares", func() { sum = p.b.SumSquares(un(s)) })
	return sum
}
