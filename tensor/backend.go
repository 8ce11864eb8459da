package tensor

import (
	"context"

	"dflash/dtype"
	"dflash/flex"
)

// Backend is the memory and kernel set that ops run on, for element type T
// (the host type of the values: float32 in training, float64 for the
// conformance reference). Tensors' elements are Storage the backend
// allocates; its kernels take Storage and Ints, row-major and contiguous
// unless a leading dimension is given. Kernels that produce a gradient
// take an accumulate flag (or Gemm's beta): with it they add into the
// gradient (+=), so that a tensor used twice receives the sum of both
// contributions; without it they overwrite it, so that the first
// contribution needs no zeroed gradient (Tape.GradDst).
//
// Two storage classes exist: activations (Alloc; bf16 on CUDA) and
// statistics (AllocStat: RMSNorm's rstd, RoPE tables, losses, loss weights;
// f32 on CUDA). On the CPU both are T. Parameters and their gradients are
// placed by Arena.Place.
//
// A backend that holds device memory queues its kernels: only Download and
// DownloadInts wait for them, and Upload, UploadInts and NewMask copy
// inputs to the device (on CUDA each such copy waits for itself). Inputs
// are uploaded before a step, so a step made of ops makes no
// synchronisation and no host copy it does not ask for.
//
// The CPU backend implements Backend[float32] and Backend[float64]; the CUDA
// backend (package tensor/tensorcuda) implements Backend[float32]. Both are
// checked by the conformance suite, package tensor/backendtest.
type Backend[T Float] interface {
	Optimizer[T] // AdamW and the gradient's norm over a parameter arena (optim.go)

	// Name identifies the backend in logs and test names.
	Name() string

	// Alloc returns n zero elements of activation storage.
	Alloc(n int) Storage[T]
	// AllocStat returns n zero elements of statistic storage.
	AllocStat(n int) Storage[T]
	// Upload returns new storage holding x (statistic storage with stat).
	Upload(x []T, stat bool) Storage[T]
	// Download copies s into dst (len(dst) = s.Len()), waiting for the
	// queued work on a device.
	Download(s Storage[T], dst []T)
	// AllocHost returns n elements of host memory into which Download
	// copies at the full speed of the link to the device, for large copies
	// repeated through the same buffer (a checkpoint's snapshot):
	// page-locked memory on a device, so that the copy of storage held in
	// T's precision is one transfer without the driver's staging, and
	// plain memory on the CPU. It returns an error when the memory cannot
	// be had. Give it back with FreeHost.
	AllocHost(n int) ([]T, error)
	// FreeHost gives back memory from AllocHost; h must not be used
	// afterwards.
	FreeHost(h []T) error
	// AllocInts returns n zero int32 elements.
	AllocInts(n int) Ints
	// UploadInts returns new int32 storage holding x.
	UploadInts(x []int32) Ints
	// DownloadInts copies s into dst, waiting for the queued work on a device.
	DownloadInts(s Ints, dst []int32)
	// Fill sets every element of s to v.
	Fill(s Storage[T], v float64)
	// NewMask builds the block mask of mask program p with args for d.
	NewMask(p *flex.MaskProgram, args *flex.Args, d flex.Dims) (Mask, error)
	// Prepare makes ready, before a run's first step, every kernel that its
	// steps will launch: those of every op and those of the attention calls
	// in uses (their block masks' too), so that a kernel that cannot be
	// compiled is an error here that names it (with the compiler's log)
	// rather than a panic inside a step. The CPU has nothing to prepare.
	Prepare(ctx context.Context, uses []AttentionUse) error

	// Gemm computes C = alpha·op(A)·op(B) + beta·C where op(X) is X or Xᵀ,
	// op(A) is m×k, op(B) is k×n and C is m×n, with leading dimensions lda,
	// ldb, ldc. With beta = 0, C is overwritten (NaNs in C are ignored).
	Gemm(transA, transB bool, m, n, k int, alpha T, a Storage[T], lda int, b Storage[T], ldb int, beta T, c Storage[T], ldc int)
	// GemmAdd computes D = alpha·op(A)·op(B) + C: Gemm with beta = 1 whose
	// result goes to d instead of c (a residual add in the product's
	// epilogue). C and D are m×n with leading dimension ldc; d is c or does
	// not overlap it.
	GemmAdd(transA, transB bool, m, n, k int, alpha T, a Storage[T], lda int, b Storage[T], ldb int, c, d Storage[T], ldc int)

	// Add computes out = a + b (out may be a or b).
	Add(a, b, out Storage[T])
	// Axpy computes y += alpha·x.
	Axpy(alpha T, x, y Storage[T])
	// AxpyBy computes y += alpha·s[0]·x, with the scalar s on the backend (a
	// loss's gradient, which the host never reads).
	AxpyBy(alpha T, s, x, y Storage[T])
	// Scale computes x *= alpha.
	Scale(alpha T, x Storage[T])
	// AddRows computes y[r,:] += v for every row r of y (v.Len() columns).
	AddRows(y, v Storage[T])
	// SumRows computes v += Σ_r y[r,:] (the gradient of AddRows for v).
	SumRows(y, v Storage[T])
	// Copy2D copies a rows×cols block: dst[r·dstStride+dstOff+c] (+)= src[r·srcStride+srcOff+c].
	// With accumulate it adds instead of overwriting.
	Copy2D(rows, cols int, src Storage[T], srcStride, srcOff int, dst Storage[T], dstStride, dstOff int, accumulate bool)
	// Transpose12 permutes [A, B, C, D] to [A, C, B, D]: dst[a,c,b,d] (+)= src[a,b,c,d].
	Transpose12(a, b, c, d int, src, dst Storage[T], accumulate bool)

	// Gather copies rows of table: out[i,:] = table[ids[i],:] (dim columns).
	Gather(table Storage[T], dim int, ids Ints, out Storage[T])
	// ScatterAdd is Gather's gradient: dtable[ids[i],:] += dout[i,:].
	ScatterAdd(dout Storage[T], dim int, ids Ints, dtable Storage[T])

	// RMSNorm computes, per row of x (dim columns), rstd = 1/sqrt(mean(x²)+eps)
	// and y = x·rstd·w.
	RMSNorm(x, w Storage[T], dim int, eps float64, y, rstd Storage[T])
	// RMSNormBackward computes, with x̂ = x·rstd and g = dy·w:
	// dx (+)= rstd·(g − x̂·mean(g·x̂)), adding with accumulate, and
	// dw += Σ_rows dy·x̂, always adding (dx or dw may be nil).
	RMSNormBackward(x, w, rstd, dy Storage[T], dim int, dx, dw Storage[T], accumulate bool)

	// RoPE rotates each head of x ([rows, heads, headDim]) by the angles of its
	// row in HF's rotate_half convention, with c = cos[r,i], s = sin[r,i] for
	// i < headDim/2: y[i] = x[i]·c − x[i+h]·s, y[i+h] = x[i+h]·c + x[i]·s
	// (h = headDim/2). cos and sin are [rows, headDim/2] statistics. With
	// inverse the rotation is by −angle (RoPE's gradient); with accumulate
	// the result is added into y instead of overwriting it.
	RoPE(x Storage[T], heads, headDim int, cos, sin Storage[T], y Storage[T], inverse, accumulate bool)

	// NormRoPE is QK-norm, RoPE and the move to attention's layout in one
	// pass. For x [batch, length, heads, headDim] whose rows (b, l) lie
	// xStride elements apart (heads·headDim when x is dense; more when x is a
	// block of a product's columns: x then spans (batch·length−1)·xStride +
	// heads·headDim elements) and each (b, l, h), with r = b·length + l, it
	// computes rstd[r·heads+h] = 1/sqrt(mean(x[b,l,h,:]²)+eps)
	// and y[b,h,l,:] = RoPE_r(x[b,l,h,:]·rstd·w), y [batch, heads, length,
	// headDim] (dense), where RoPE_r is RoPE's rotation by cos[r,:] and sin[r,:].
	// With w nil there is no norm: y[b,h,l,:] = RoPE_r(x[b,l,h,:]) and rstd
	// is not written (it may be nil). With length 1 the layout is x's.
	NormRoPE(x, w Storage[T], batch, length, heads, headDim, xStride int, eps float64, cos, sin, y, rstd Storage[T])
	// NormRoPEBackward computes NormRoPE's gradients for dy: with
	// g = RoPE_r⁻¹(dy[b,h,l,:]) (the rotation by −angle) and x̂ = x[b,l,h,:]·rstd,
	// dx[b,l,h,:] (+)= rstd·(g·w − x̂·mean(g·w·x̂)), adding with accumulate,
	// and dw += Σ g·x̂ over every (b, l, h), always adding (dx or dw may be
	// nil); with w nil, dx[b,l,h,:] (+)= g, and x and rstd are not read
	// (they may be nil). x and dx have rows xStride apart (NormRoPE's); the
	// elements of dx between its rows are neither read nor written.
	NormRoPEBackward(x, w, rstd, dy Storage[T], batch, length, heads, headDim, xStride int, cos, sin, dx, dw Storage[T], accumulate bool)

	// SwiGLU computes out = silu(gate)·up with silu(g) = g·σ(g).
	SwiGLU(gate, up, out Storage[T])
	// SwiGLUBackward computes dgate (+)= dout·up·σ(g)·(1 + g·(1−σ(g))) and
	// dup (+)= dout·silu(g), adding with accumulate (either may be nil).
	SwiGLUBackward(gate, up, dout, dgate, dup Storage[T], accumulate bool)
	// SwiGLUPacked is SwiGLU on one product holding gate and up side by
	// side: for y2 [rows, 2·cols], out[r,c] = silu(y2[r,c])·y2[r,cols+c],
	// out [rows, cols].
	SwiGLUPacked(y2 Storage[T], cols int, out Storage[T])
	// SwiGLUPackedBackward computes SwiGLUPacked's gradients for dout
	// [rows, cols] into dy2 [rows, 2·cols]: SwiGLUBackward's dgate in the
	// first cols columns of each row and dup in the last, adding with
	// accumulate.
	SwiGLUPackedBackward(y2, dout Storage[T], cols int, dy2 Storage[T], accumulate bool)

	// SoftmaxXent treats logits as rows×vocab. For each row r with
	// targets[r] ≥ 0 it writes loss[r] = logsumexp(logits[r]) − logits[r][t],
	// argmax[r], and overwrites logits[r] with scale[r]·(softmax(logits[r]) − onehot(t))
	// (the gradient of scale[r]·loss[r]). Rows with targets[r] < 0 get loss 0,
	// argmax −1 and a zero gradient. scale and loss are statistics.
	SoftmaxXent(logits Storage[T], rows, vocab int, targets Ints, scale, loss Storage[T], argmax Ints)
	// ArgmaxRows treats x as rows×cols (cols ≥ 1) and writes out[r] =
	// argmax_j x[r,j], the lowest j among equal maxima, a NaN counting as
	// larger than every number (the row's first NaN wins): Argmax of each
	// row, on the backend, so that greedy decoding downloads rows ids
	// (RowArgmax) instead of rows×cols logits. It has no gradient.
	ArgmaxRows(x Storage[T], rows, cols int, out Ints)

	// Attention computes out = softmax(score(q·kᵀ·scale) masked)·v and the
	// per-row log-sum-exp lse (a statistic), with package flex's layouts and
	// semantics (flex.Forward; out laid out as d.OutHeadsInner says). out
	// and lse are new whole allocations of step memory (a tape may
	// FreeStep them).
	Attention(d flex.Dims, q, k, v Storage[T], m Mask, score *flex.ScoreProgram, scale float64) (out, lse Storage[T])
	// AttentionBackward writes the gradients of Attention for dout into dq,
	// dk and dv (any may be nil), as flex.Backward computes them, or adds
	// them with accumulate.
	AttentionBackward(d flex.Dims, q, k, v, out, lse, dout Storage[T], m Mask, score *flex.ScoreProgram, scale float64, dq, dk, dv Storage[T], accumulate bool)

	// Decoding: a KV cache allocated once for a maximum context (see
	// KVCache), rows appended to it and attention over it.

	// AllocKeep returns n zero elements of activation storage that
	// outlives every step until FreeKeep gives it back: a decoding's KV
	// cache (bf16 on CUDA, as the keys and values that fill it).
	AllocKeep(n int) Storage[T]
	// FreeKeep gives back a whole allocation of AllocKeep; s must not be
	// used afterwards.
	FreeKeep(s Storage[T])
	// CacheRows writes n rows of heads·headDim values into cache, laid out
	// [heads, maxLen, headDim], at rows at.Past..at.Past+n−1 (n = at.Len −
	// at.Past), reading at.Past from at.At:
	// cache[h, at.Past+t, :] = src[h, t, :] (src [heads, n, headDim]) or,
	// with headsInner, src[t, h, :] (src [n, heads, headDim]).
	CacheRows(src Storage[T], heads, n, headDim int, headsInner bool, cache Storage[T], maxLen int, at CacheAt)
	// DecodeAttention attends n query rows to the first at.Len keys of a
	// cache (read from at.At): for q and out [heads, n, headDim], k and v
	// [kvHeads, maxLen, headDim] (query head h reads kv head g =
	// h/(heads/kvHeads)) and m_i visible keys of row i (at.Len − n + i + 1
	// with causal: the rows are the cache's last n positions; at.Len
	// without),
	//
	//	out[h,i] = Σ_{j<m_i} softmax_j(scale·q[h,i]·k[g,j]) · v[g,j].
	//
	// A device splits the cache by at.Span, not by at.Len. It has no
	// gradient (decoding only).
	DecodeAttention(q Storage[T], heads, n, headDim int, k, v Storage[T], kvHeads, maxLen int, at CacheAt, causal bool, scale float64, out Storage[T])

	// Step memory (see the package doc: one step's storage lives until
	// ResetStep). On the CPU these do nothing: the garbage collector owns
	// the memory.

	// ResetStep ends a step: storage allocated since the previous ResetStep
	// (Alloc, AllocOut, AllocStat, AllocStatOut, Upload, the Ints and masks, Attention's
	// results, Like of step storage) must not be used after it. Parameters
	// (AllocParams) and kept tables (KeepStat) are not step memory.
	ResetStep()
	// MarkStep returns the position in the step's memory, for ReleaseStep.
	MarkStep() StepMark
	// ReleaseStep frees everything allocated since MarkStep returned m (a
	// pass without gradients keeps only what it copied out before the
	// release; see Scope).
	ReleaseStep(m StepMark)
	// FreeStep gives back s, a whole allocation of the current step (Alloc,
	// AllocOut, AllocStat, Upload, Attention's results, or Like of step
	// storage), before the step ends, so that a later allocation of the same
	// size reuses it; a Slice of one, or parameter storage, is a programmer
	// error and panics. s must not be used afterwards.
	FreeStep(s Storage[T])
	// FreesStep reports whether FreeStep gives memory back for reuse (a
	// device's step arena), so that a tape that releases memory
	// (TapeOf.ReleaseGrads) does so: false on the CPU.
	FreesStep() bool

	// AllocOut returns n elements of activation storage with undefined
	// contents, for an op that writes every element before it reads any
	// (Alloc on the CPU; on a GPU it spares Alloc's memset).
	AllocOut(n int) Storage[T]
	// AllocStatOut is AllocOut for statistic storage (AllocStat's), for
	// a statistic its op writes whole (a norm's rstd).
	AllocStatOut(n int) Storage[T]
	// KeepStat returns x as statistic storage that outlives every step, for
	// a table made once and read by every step (Upload on the CPU).
	KeepStat(x []T) Storage[T]
	// XentChunk returns the logit elements one chunk of LMHeadXent may hold
	// when it is given no chunk size: DefaultXentChunk on the CPU (a chunk
	// that stays in its caches); a GPU wants chunks of thousands of rows,
	// where the three products of a chunk run at full speed instead of
	// re-reading the LM head for a few rows at a time.
	XentChunk() int

	// Replay runs fn, a region of ops that repeats step after step with the
	// same shapes, keyed by key (compared with ==), and returns what it did.
	// The CPU runs fn and returns "". The CUDA backend records the region as
	// a CUDA graph per key: the first run of a key runs its ops as usual;
	// later runs run the region's host code and launch the recorded work
	// when everything it queues (addresses, shapes, scalars) is what was
	// recorded, and record it anew otherwise, returning "eager", "captured",
	// "launched", "recaptured" or "ungraphed" (recording failed once; the
	// reason is in the error log). A replay never runs other work than the
	// region's. fn must not read values back from the backend (Download)
	// nor upload: do those before or after the region.
	Replay(key any, fn func()) string

	// Parameter placement (Arena.Place, Arena.AllocOn).

	// AllocParams returns parameter storage of n elements that lives as
	// long as the backend, to be written with WriteParams: the master copy
	// (nil without master: a frozen model) and the compute copy the ops
	// read. On the CPU both are one zeroed host slice, master or not.
	AllocParams(n int, master bool) (values, compute Storage[T])
	// WriteParams copies host into dst, a range of either copy, rounding to
	// its element type.
	WriteParams(dst Storage[T], host []T)
	// WriteParamBytes copies raw, the little-endian bytes of dst.Len()
	// elements of dtype dt (a float dtype of safetensors), into dst, a range
	// of either copy, converting each to dst's element type by value,
	// rounding to nearest: it writes what WriteParams writes of the values
	// that dtype.DecodeFloat32 reads from raw (a float64 destination takes
	// F64 values exactly). Storage of dtype dt takes the bytes as they are,
	// with no conversion on the host: a bf16 model loads into CUDA's bf16
	// compute copy by copies alone. raw may be reused once it returns.
	WriteParamBytes(dst Storage[T], dt dtype.DType, raw []byte)
	// HostParams reports whether AllocParams returns host memory (the CPU):
	// an arena in host memory then stays where it is (Arena.Place), and a
	// model checks the host's memory before it allocates its parameters.
	HostParams() bool
}

// StepMark is a position in a backend's step memory; its meaning is the
// backend's.
type StepMark [3]int64

// Scope runs fn, a part of a step whose storage is dead once it returns (a
// pass without gradients that copies what it keeps into storage allocated
// before the scope), and then releases everything fn allocated on b
// (MarkStep, ReleaseStep). On the CPU it only runs fn.
func Scope[T Float](b Backend[T], fn func()) {
	m := b.MarkStep()
	fn()
	b.ReleaseStep(m)
}
