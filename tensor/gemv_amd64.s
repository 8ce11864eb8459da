#include "textflag.h"

// func sdot32(n int, x, y *float32) float32
// Returns Σ_{i<n} x[i]·y[i] for n > 0 a multiple of 32; requires AVX2 and FMA.
// Four ymm accumulators of 8 lanes, summed at the end.
TEXT ·sdot32(SB), NOSPLIT, $0-28
	MOVQ n+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JNZ loop

	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func sdot4x8(n int, p *float32, stride int, q *float32, out *float32)
// Writes out[r] = Σ_{i<n} p[r·stride+i]·q[i] for r = 0..3 and n > 0 a
// multiple of 8; requires AVX2 and FMA. Each 8-lane chunk of q is loaded
// once for the four rows; eight ymm accumulators (two per row) keep the
// FMA pipes busy, summed at the end.
TEXT ·sdot4x8(SB), NOSPLIT, $0-40
	MOVQ n+0(FP), CX
	MOVQ p+8(FP), SI
	MOVQ stride+16(FP), DX
	MOVQ q+24(FP), DI
	MOVQ out+32(FP), R8
	SHLQ $2, DX
	SHLQ $2, CX
	LEAQ (SI)(DX*1), R9
	LEAQ (R9)(DX*1), R10
	LEAQ (R10)(DX*1), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	MOVQ CX, BX
	ANDQ $-64, BX

loop16:
	CMPQ AX, BX
	JGE tail8
	VMOVUPS (DI)(AX*1), Y8
	VMOVUPS 32(DI)(AX*1), Y9
	VFMADD231PS (SI)(AX*1), Y8, Y0
	VFMADD231PS (R9)(AX*1), Y8, Y1
	VFMADD231PS (R10)(AX*1), Y8, Y2
	VFMADD231PS (R11)(AX*1), Y8, Y3
	VFMADD231PS 32(SI)(AX*1), Y9, Y4
	VFMADD231PS 32(R9)(AX*1), Y9, Y5
	VFMADD231PS 32(R10)(AX*1), Y9, Y6
	VFMADD231PS 32(R11)(AX*1), Y9, Y7
	ADDQ $64, AX
	JMP loop16

tail8:
	CMPQ AX, CX
	JGE reduce
	VMOVUPS (DI)(AX*1), Y8
	VFMADD231PS (SI)(AX*1), Y8, Y0
	VFMADD231PS (R9)(AX*1), Y8, Y1
	VFMADD231PS (R10)(AX*1), Y8, Y2
	VFMADD231PS (R11)(AX*1), Y8, Y3

reduce:
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	VEXTRACTF128 $1, Y0, X4
	VADDPS X4, X0, X0
	VEXTRACTF128 $1, Y1, X5
	VADDPS X5, X1, X1
	VEXTRACTF128 $1, Y2, X6
	VADDPS X6, X2, X2
	VEXTRACTF128 $1, Y3, X7
	VADDPS X7, X3, X3
	VHADDPS X1, X0, X0
	VHADDPS X3, X2, X2
	VHADDPS X2, X0, X0
	VMOVUPS X0, (R8)
	VZEROUPPER
	RET

// func sgemv4x2(k int, a *float32, lda int, b *float32, ldb int, n int, c *float32, ldc int)
// Writes c[r·ldc+j] = Σ_{i<k} a[r·lda+i]·b[j·ldb+i] for rows r = 0..3 of a and
// rows j < n of b, n > 0 even and k > 0 a multiple of 8; requires AVX2 and
// FMA. Two rows of b at a time: each 8-lane chunk of the four rows of a and
// the two of b is loaded once for eight FMAs into eight accumulators.
TEXT ·sgemv4x2(SB), NOSPLIT, $0-64
	MOVQ k+0(FP), CX
	SHLQ $2, CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), DX
	SHLQ $2, DX
	LEAQ (SI)(DX*1), R9
	LEAQ (R9)(DX*1), R10
	LEAQ (R10)(DX*1), R11
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), DX
	SHLQ $2, DX
	LEAQ (DI)(DX*1), R12
	SHLQ $1, DX
	MOVQ c+48(FP), R8
	MOVQ ldc+56(FP), BX
	SHLQ $2, BX
	LEAQ (R8)(BX*2), R13
	ADDQ BX, R13

cols:
	MOVQ n+40(FP), AX
	CMPQ AX, $2
	JLT done
	SUBQ $2, AX
	MOVQ AX, n+40(FP)
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX

inner:
	VMOVUPS (DI)(AX*1), Y8
	VMOVUPS (R12)(AX*1), Y9
	VMOVUPS (SI)(AX*1), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y1
	VMOVUPS (R9)(AX*1), Y11
	VFMADD231PS Y8, Y11, Y2
	VFMADD231PS Y9, Y11, Y3
	VMOVUPS (R10)(AX*1), Y12
	VFMADD231PS Y8, Y12, Y4
	VFMADD231PS Y9, Y12, Y5
	VMOVUPS (R11)(AX*1), Y13
	VFMADD231PS Y8, Y13, Y6
	VFMADD231PS Y9, Y13, Y7
	ADDQ $32, AX
	CMPQ AX, CX
	JLT inner

	VEXTRACTF128 $1, Y0, X8
	VADDPS X8, X0, X0
	VEXTRACTF128 $1, Y1, X9
	VADDPS X9, X1, X1
	VEXTRACTF128 $1, Y2, X10
	VADDPS X10, X2, X2
	VEXTRACTF128 $1, Y3, X11
	VADDPS X11, X3, X3
	VEXTRACTF128 $1, Y4, X12
	VADDPS X12, X4, X4
	VEXTRACTF128 $1, Y5, X13
	VADDPS X13, X5, X5
	VEXTRACTF128 $1, Y6, X14
	VADDPS X14, X6, X6
	VEXTRACTF128 $1, Y7, X15
	VADDPS X15, X7, X7
	VHADDPS X1, X0, X0
	VHADDPS X3, X2, X2
	VHADDPS X2, X0, X0
	VHADDPS X5, X4, X4
	VHADDPS X7, X6, X6
	VHADDPS X6, X4, X4
	VMOVLPS X0, (R8)
	VMOVHPS X0, (R8)(BX*1)
	VMOVLPS X4, (R8)(BX*2)
	VMOVHPS X4, (R13)
	ADDQ $8, R8
	ADDQ $8, R13
	ADDQ DX, DI
	ADDQ DX, R12
	JMP cols

done:
	VZEROUPPER
	RET
