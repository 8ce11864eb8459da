package tensor

// Backend is the kernel set that ops run on, for element type T. All slices
// are row-major and contiguous unless a leading dimension is given. Kernels
// that produce a gradient accumulate into it (+=) unless said otherwise, so
// that a tensor used twice receives the sum of both contributions.
//
// The CPU backend implements Backend[float32] and Backend[float64], checked
// by the conformance suite (package tensor/backendtest) that any later
// backend must also pass within its tolerances. There is no GPU backend yet.
type Backend[T Float] interface {
	// Name identifies the backend in logs and test names.
	Name() string

	// Gemm computes C = alpha·op(A)·op(B) + beta·C where op(X) is X or Xᵀ,
	// op(A) is m×k, op(B) is k×n and C is m×n, with leading dimensions lda,
	// ldb, ldc. With beta = 0, C is overwritten (NaNs in C are ignored).
	Gemm(transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)

	// Axpy computes y += alpha·x.
	Axpy(alpha T, x, y []T)
	// Scale computes x *= alpha.
	Scale(alpha T, x []T)
	// AddRows computes y[r,:] += v for every row r of y (len(v) columns).
	AddRows(y, v []T)
	// SumRows computes v += Σ_r y[r,:] (the gradient of AddRows for v).
	SumRows(y, v []T)
	// Copy2D copies a rows×cols block: dst[r·dstStride+dstOff+c] (+)= src[r·srcStride+srcOff+c].
	// With accumulate it adds instead of overwriting.
	Copy2D(rows, cols int, src []T, srcStride, srcOff int, dst []T, dstStride, dstOff int, accumulate bool)
	// Transpose12 permutes [A, B, C, D] to [A, C, B, D]: dst[a,c,b,d] (+)= src[a,b,c,d].
	Transpose12(a, b, c, d int, src, dst []T, accumulate bool)

	// Gather copies rows of table: out[i,:] = table[ids[i],:] (dim columns).
	Gather(table []T, dim int, ids []int32, out []T)
	// ScatterAdd is Gather's gradient: dtable[ids[i],:] += dout[i,:].
	ScatterAdd(dout []T, dim int, ids []int32, dtable []T)

	// RMSNorm computes, per row of x (dim columns), rstd = 1/sqrt(mean(x²)+eps)
	// and y = x·rstd·w.
	RMSNorm(x, w []T, dim int, eps float64, y, rstd []T)
	// RMSNormBackward accumulates, with x̂ = x·rstd and g = dy·w:
	// dx += rstd·(g − x̂·mean(g·x̂)) and dw += Σ_rows dy·x̂ (dx or dw may be nil).
	RMSNormBackward(x, w, rstd, dy []T, dim int, dx, dw []T)

	// RoPE rotates each head of x ([rows, heads, headDim]) by the angles of its
	// row in HF's rotate_half convention, with c = cos[r,i], s = sin[r,i] for
	// i < headDim/2: y[i] = x[i]·c − x[i+h]·s, y[i+h] = x[i+h]·c + x[i]·s
	// (h = headDim/2). cos and sin are [rows, headDim/2]. With inverse the
	// rotation is by −angle and the result is accumulated into y (RoPE's gradient).
	RoPE(x []T, heads, headDim int, cos, sin []T, y []T, inverse bool)

	// SwiGLU computes out = silu(gate)·up with silu(g) = g·σ(g).
	SwiGLU(gate, up, out []T)
	// SwiGLUBackward accumulates dgate += dout·up·σ(g)·(1 + g·(1−σ(g))) and dup += dout·silu(g)
	// (either may be nil).
	SwiGLUBackward(gate, up, dout, dgate, dup []T)

	// SoftmaxXent treats logits as rows×vocab. For each row r with
	// targets[r] ≥ 0 it writes loss[r] = logsumexp(logits[r]) − logits[r][t],
	// argmax[r], and overwrites logits[r] with scale[r]·(softmax(logits[r]) − onehot(t))
	// (the gradient of scale[r]·loss[r]). Rows with targets[r] < 0 get loss 0,
	// argmax −1 and a zero gradient.
	SoftmaxXent(logits []T, rows, vocab int, targets []int32, scale []T, loss []T, argmax []int32)

	AttentionBackend[T]
}
