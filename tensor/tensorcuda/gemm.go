package tensorcuda

import (
	"fmt"

	"dflash/cuda"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/tensor"
)

// Gemm computes C = alpha·op(A)·op(B) + beta·C with tensor.Backend.Gemm's
// semantics: row-major, op(X) is X or Xᵀ, op(A) is m×k, op(B) k×n, C m×n,
// leading dimensions lda, ldb, ldc (in elements, at least the stored row
// length). A, B and C are in storage dtype; products accumulate in fp32
// (cuBLASLt through gpu.Device.Gemm). With beta = 0, C is overwritten
// (NaNs in C are ignored). m or n zero does nothing; k zero panics (the
// product would only scale C).
func (o *Ops) Gemm(transA, transB bool, m, n, k int, alpha float32, a gpu.Buffer, lda int, b gpu.Buffer, ldb int, beta float32, c gpu.Buffer, ldc int) error {
	return o.gemm("Gemm", o.dt, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, c, ldc)
}

// GemmAdd computes D = alpha·op(A)·op(B) + C (tensor.Backend.GemmAdd): one
// product whose epilogue reads C and writes D, both in storage dtype with
// leading dimension ldc; d is c or does not overlap it.
func (o *Ops) GemmAdd(transA, transB bool, m, n, k int, alpha float32, a gpu.Buffer, lda int, b gpu.Buffer, ldb int, c, d gpu.Buffer, ldc int) error {
	return o.gemm("GemmAdd", o.dt, transA, transB, m, n, k, alpha, a, lda, b, ldb, 1, c, d, ldc)
}

// GemmF32Out is Gemm with C in fp32 whatever the storage dtype (parameter
// gradients: dW += xᵀ·dy accumulated in fp32 across steps and micro-batches).
func (o *Ops) GemmF32Out(transA, transB bool, m, n, k int, alpha float32, a gpu.Buffer, lda int, b gpu.Buffer, ldb int, beta float32, c gpu.Buffer, ldc int) error {
	return o.gemm("GemmF32Out", dtype.F32, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, c, ldc)
}

// gemm checks and queues D = alpha·op(A)·op(B) + beta·C with C and D of
// dtype out (d may be c).
func (o *Ops) gemm(op string, out dtype.DType, transA, transB bool, m, n, k int, alpha float32, a gpu.Buffer, lda int, b gpu.Buffer, ldb int, beta float32, c, d gpu.Buffer, ldc int) error {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("tensorcuda: %s: m=%d n=%d k=%d", op, m, n, k))
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		panic(fmt.Sprintf("tensorcuda: %s: k = 0 (m=%d n=%d)", op, m, n))
	}
	ar, ac, br, bc := tensor.GemmOperands(transA, transB, m, n, k)
	matrix(op, "A", a, ar, ac, lda, o.es())
	matrix(op, "B", b, br, bc, ldb, o.es())
	matrix(op, "C", c, m, n, ldc, int64(out.Size()))
	if d.Ptr != c.Ptr {
		matrix(op, "D", d, m, n, ldc, int64(out.Size()))
	}
	if o.skinny(out, transA, transB, m, n, k, a, lda, b, ldb) {
		return o.SkinnyGemm(m, n, k, alpha, a, lda, b, ldb, beta, c, d, ldc)
	}
	spec := gpu.GemmSpec{M: m, N: n, K: k, TransA: transA, TransB: transB, LDA: lda, LDB: ldb, LDC: ldc, In: o.dt, Out: out}
	return o.run.gemm(spec, alpha, a, b, beta, c, d)
}

// Decoding's products (op_skinny.cu): at most skMaxRows rows against a
// weight, bound by reading the weight.
const (
	skMaxRows  = 16 // rows of x: one mma.sync tile
	skCols     = 32 // output columns per block (the kernel's SK_COLS)
	skMaxWarps = 16 // warps per block at most, splitting k (512 threads: 32 KiB of partial sums)
	skMinWarps = 8
	// skChunks is the 32-column chunks of k a warp should stream at least
	// (more warps for a longer k).
	skChunks = 16
	// skMaxWaves bounds the blocks (per multiprocessor): past it cuBLASLt's
	// wide tiles read the weight as fast or faster (measured on the H200,
	// docs/PERF.md 2026-12-03: gate_up's 768 blocks and the LM head's 4748
	// at 0.65-0.97x).
	skMaxWaves = 2
)

// skinny reports whether a product runs on op_skinny_gemm rather than
// cuBLASLt: bf16 in and out, x·Wᵀ (A plain, B transposed) with at most
// skMaxRows rows, at most skMaxWaves blocks of skCols columns per
// multiprocessor, k a multiple of 32, and every row of A and B and the
// operands themselves 16-byte aligned.
func (o *Ops) skinny(out dtype.DType, transA, transB bool, m, n, k int, a gpu.Buffer, lda int, b gpu.Buffer, ldb int) bool {
	return o.dt == dtype.BF16 && out == dtype.BF16 && !transA && transB && m <= skMaxRows && k%32 == 0 &&
		(n+skCols-1)/skCols <= skMaxWaves*max(o.sms, 1) && lda%8 == 0 && ldb%8 == 0 && a.Ptr%16 == 0 && b.Ptr%16 == 0
}

// SkinnyGemm launches op_skinny_gemm: D = alpha·A·Bᵀ + beta·C for A m×k
// (m ≤ skMaxRows) and B n×k, bf16, through skinny's conditions. A block
// computes skCols columns; its warps split k, skChunks chunks each or more,
// skMinWarps to skMaxWarps of them (measured on the H200: 8 for k = 4096,
// 16 for 12288).
func (o *Ops) SkinnyGemm(m, n, k int, alpha float32, a gpu.Buffer, lda int, b gpu.Buffer, ldb int, beta float32, c, d gpu.Buffer, ldc int) error {
	if o.dt != dtype.BF16 || m > skMaxRows || k%32 != 0 {
		panic(fmt.Sprintf("tensorcuda: SkinnyGemm: %s, %d×%d×%d", o.dt, m, n, k))
	}
	warps := min(skMaxWarps, max(skMinWarps, k/32/skChunks))
	call := o.begin(kSkinnyGemm).ptr("x", a).i32("ldx", lda).ptr("w", b).i32("ldw", ldb).ptr("c", c).ptr("y", d).i32("ldc", ldc).
		i32("m", m).i32("n", n).i32("k", k).f32("alpha", alpha).f32("beta", beta)
	return o.launch(call, cuda.Dim(uint32((n+skCols-1)/skCols), 1, 1), warps*32)
}

// matrix panics unless b holds a rows×cols matrix with row stride ld of
// elements of size bytes.
func matrix(op, arg string, b gpu.Buffer, rows, cols, ld int, size int64) {
	if ld < cols {
		panic(fmt.Sprintf("tensorcuda: %s: %s is %d×%d with leading dimension %d", op, arg, rows, cols, ld))
	}
	need(op, arg, b, int64(rows-1)*int64(ld)+int64(cols), size)
}
