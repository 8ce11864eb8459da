package tensorcuda

import (
	"fmt"

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
	spec := gpu.GemmSpec{M: m, N: n, K: k, TransA: transA, TransB: transB, LDA: lda, LDB: ldb, LDC: ldc, In: o.dt, Out: out}
	return o.run.gemm(spec, alpha, a, b, beta, c, d)
}

// matrix panics unless b holds a rows×cols matrix with row stride ld of
// elements of size bytes.
func matrix(op, arg string, b gpu.Buffer, rows, cols, ld int, size int64) {
	if ld < cols {
		panic(fmt.Sprintf("tensorcuda: %s: %s is %d×%d with leading dimension %d", op, arg, rows, cols, ld))
	}
	need(op, arg, b, int64(rows-1)*int64(ld)+int64(cols), size)
}
