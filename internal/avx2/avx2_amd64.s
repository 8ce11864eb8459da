#include "textflag.h"

// ZERO8 clears the accumulators Y0-Y7.
#define ZERO8 \
	VXORPS Y0, Y0, Y0; VXORPS Y1, Y1, Y1; VXORPS Y2, Y2, Y2; VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; VXORPS Y5, Y5, Y5; VXORPS Y6, Y6, Y6; VXORPS Y7, Y7, Y7

// ROW16 adds alpha (broadcast in Y14) times the accumulators lo and hi to
// the 16 floats of C at DX, with Y12 and Y13 as scratch: the store of one
// row of sgemm4x16's and sgemm6x16's tiles.
#define ROW16(lo, hi) \
	VMOVUPS (DX), Y12; VMOVUPS 32(DX), Y13; \
	VFMADD231PS lo, Y14, Y12; VFMADD231PS hi, Y14, Y13; \
	VMOVUPS Y12, (DX); VMOVUPS Y13, 32(DX)

// Lane masks for the last partial chunk: 8 words of -1 then 8 of 0; the
// mask for r remaining elements is the 8 words at offset 4*(8-r).
DATA tailmask<>+0(SB)/4, $0xffffffff
DATA tailmask<>+4(SB)/4, $0xffffffff
DATA tailmask<>+8(SB)/4, $0xffffffff
DATA tailmask<>+12(SB)/4, $0xffffffff
DATA tailmask<>+16(SB)/4, $0xffffffff
DATA tailmask<>+20(SB)/4, $0xffffffff
DATA tailmask<>+24(SB)/4, $0xffffffff
DATA tailmask<>+28(SB)/4, $0xffffffff
DATA tailmask<>+32(SB)/4, $0
DATA tailmask<>+36(SB)/4, $0
DATA tailmask<>+40(SB)/4, $0
DATA tailmask<>+44(SB)/4, $0
DATA tailmask<>+48(SB)/4, $0
DATA tailmask<>+52(SB)/4, $0
DATA tailmask<>+56(SB)/4, $0
DATA tailmask<>+60(SB)/4, $0
GLOBL tailmask<>(SB), RODATA|NOPTR, $64

// func sgemm4x2(a *float32, lda int, b *float32, ldb int, k int, pairs int, c *float32, ldc int, alpha float32, acc bool)
//
// For p < pairs and rows i < 4: C[i, 2p+x] = alpha * (a_i · b_{2p+x}) for
// x in {0, 1}, plus the old C[i, 2p+x] when acc. a_i is row i of a (stride
// lda elements), b_j row j of b (stride ldb), C row i starts at c + i*ldc;
// the dot products run over k >= 1 elements, the last k % 8 with masked
// loads. Needs AVX2 and FMA. Eight ymm accumulators hold the 4x2 partial
// sums; two VHADDPS rounds and a lane swap reduce them to one vector
// [r0c0 r0c1 r1c0 r1c1 | r2c0 r2c1 r3c0 r3c1].
TEXT ·sgemm4x2(SB), NOSPLIT, $0-69
	MOVQ a+0(FP), R8
	MOVQ lda+8(FP), R12
	SHLQ $2, R12
	LEAQ (R8)(R12*1), R9
	LEAQ (R9)(R12*1), R10
	LEAQ (R10)(R12*1), R11
	MOVQ b+16(FP), DI
	MOVQ ldb+24(FP), R13
	SHLQ $2, R13
	MOVQ k+32(FP), CX
	MOVQ CX, R14
	ANDQ $7, R14          // remaining elements
	ANDQ $-8, CX
	SHLQ $2, CX           // bytes in full chunks
	LEAQ tailmask<>(SB), AX
	MOVQ $8, R15
	SUBQ R14, R15
	VMOVUPS (AX)(R15*4), Y14
	MOVQ pairs+40(FP), BX
	MOVQ c+48(FP), DX
	MOVQ ldc+56(FP), R15
	SHLQ $2, R15
	VBROADCASTSS alpha+64(FP), Y15

pair:
	TESTQ BX, BX
	JZ done
	LEAQ (DI)(R13*1), SI
	ZERO8
	XORQ AX, AX
	CMPQ AX, CX
	JAE tail

inner:
	VMOVUPS (DI)(AX*1), Y12
	VMOVUPS (SI)(AX*1), Y13
	VMOVUPS (R8)(AX*1), Y8
	VFMADD231PS Y12, Y8, Y0
	VFMADD231PS Y13, Y8, Y1
	VMOVUPS (R9)(AX*1), Y9
	VFMADD231PS Y12, Y9, Y2
	VFMADD231PS Y13, Y9, Y3
	VMOVUPS (R10)(AX*1), Y10
	VFMADD231PS Y12, Y10, Y4
	VFMADD231PS Y13, Y10, Y5
	VMOVUPS (R11)(AX*1), Y11
	VFMADD231PS Y12, Y11, Y6
	VFMADD231PS Y13, Y11, Y7
	ADDQ $32, AX
	CMPQ AX, CX
	JB inner

tail:
	TESTQ R14, R14
	JZ reduce
	VMASKMOVPS (DI)(AX*1), Y14, Y12
	VMASKMOVPS (SI)(AX*1), Y14, Y13
	VMASKMOVPS (R8)(AX*1), Y14, Y8
	VFMADD231PS Y12, Y8, Y0
	VFMADD231PS Y13, Y8, Y1
	VMASKMOVPS (R9)(AX*1), Y14, Y9
	VFMADD231PS Y12, Y9, Y2
	VFMADD231PS Y13, Y9, Y3
	VMASKMOVPS (R10)(AX*1), Y14, Y10
	VFMADD231PS Y12, Y10, Y4
	VFMADD231PS Y13, Y10, Y5
	VMASKMOVPS (R11)(AX*1), Y14, Y11
	VFMADD231PS Y12, Y11, Y6
	VFMADD231PS Y13, Y11, Y7

reduce:
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y2, Y0, Y0
	VHADDPS Y6, Y4, Y4
	VPERM2F128 $0x20, Y4, Y0, Y1
	VPERM2F128 $0x31, Y4, Y0, Y2
	VADDPS Y2, Y1, Y1
	VMULPS Y15, Y1, Y1
	LEAQ (DX)(R15*1), AX  // row 1
	CMPB acc+68(FP), $0
	JEQ store
	VMOVSD (DX), X2
	VMOVHPS (AX), X2, X2
	VMOVSD (DX)(R15*2), X3
	LEAQ (AX)(R15*2), SI  // row 3
	VMOVHPS (SI), X3, X3
	VINSERTF128 $1, X3, Y2, Y2
	VADDPS Y2, Y1, Y1

store:
	VMOVLPS X1, (DX)
	VMOVHPS X1, (AX)
	VEXTRACTF128 $1, Y1, X3
	VMOVLPS X3, (DX)(R15*2)
	LEAQ (AX)(R15*2), SI
	VMOVHPS X3, (SI)
	ADDQ $8, DX
	LEAQ (DI)(R13*2), DI
	DECQ BX
	JMP pair

done:
	VZEROUPPER
	RET

// Constants of vexp32 (see exp32 in tile.go).
DATA expc<>+0(SB)/4, $-87.3           // lowest argument; below gives 0
DATA expc<>+4(SB)/4, $1.44269504088896341 // log2(e)
DATA expc<>+8(SB)/4, $0.693359375     // ln2, high part
DATA expc<>+12(SB)/4, $-2.12194440e-4 // ln2, low part
DATA expc<>+16(SB)/4, $1.9875691500e-4
DATA expc<>+20(SB)/4, $1.3981999507e-3
DATA expc<>+24(SB)/4, $8.3334519073e-3
DATA expc<>+28(SB)/4, $4.1665795894e-2
DATA expc<>+32(SB)/4, $1.6666665459e-1
DATA expc<>+36(SB)/4, $5.0000001201e-1
DATA expc<>+40(SB)/4, $1.0
DATA expc<>+44(SB)/4, $127
DATA expc<>+48(SB)/4, $88.0            // highest argument (clamped)
GLOBL expc<>(SB), RODATA|NOPTR, $52

// func vexp32(x *float32, n int, shift float32) (sum float32)
//
// Sets x[i] = exp(x[i] - shift) for i < n (n a multiple of 8) and returns
// their sum. Same method and accuracy as exp32: arguments below -87.3
// (including -Inf) give exactly 0, arguments are clamped at 88. Needs AVX2
// and FMA.
TEXT ·vexp32(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX
	SHLQ $2, CX
	ADDQ DI, CX
	VBROADCASTSS shift+16(FP), Y15
	VBROADCASTSS expc<>+0(SB), Y14
	VBROADCASTSS expc<>+4(SB), Y13
	VBROADCASTSS expc<>+8(SB), Y12
	VBROADCASTSS expc<>+12(SB), Y11
	VBROADCASTSS expc<>+48(SB), Y10
	VXORPS Y9, Y9, Y9
	CMPQ DI, CX
	JAE done

loop:
	VMOVUPS (DI), Y0
	VSUBPS Y15, Y0, Y0
	VCMPPS $1, Y14, Y0, Y1      // Y1 = x < -87.3
	VMAXPS Y14, Y0, Y0
	VMINPS Y10, Y0, Y0
	VMULPS Y13, Y0, Y2
	VROUNDPS $0, Y2, Y2         // n = round(x·log2e)
	VFNMADD231PS Y12, Y2, Y0    // r = x - n·ln2hi
	VFNMADD231PS Y11, Y2, Y0    // r -= n·ln2lo
	VBROADCASTSS expc<>+16(SB), Y4
	VBROADCASTSS expc<>+20(SB), Y5
	VFMADD213PS Y5, Y0, Y4      // p = p·r + c
	VBROADCASTSS expc<>+24(SB), Y5
	VFMADD213PS Y5, Y0, Y4
	VBROADCASTSS expc<>+28(SB), Y5
	VFMADD213PS Y5, Y0, Y4
	VBROADCASTSS expc<>+32(SB), Y5
	VFMADD213PS Y5, Y0, Y4
	VBROADCASTSS expc<>+36(SB), Y5
	VFMADD213PS Y5, Y0, Y4
	VMULPS Y0, Y0, Y5           // r²
	VFMADD213PS Y0, Y5, Y4      // y = p·r² + r
	VBROADCASTSS expc<>+40(SB), Y5
	VADDPS Y5, Y4, Y4           // y += 1
	VCVTPS2DQ Y2, Y3
	VPBROADCASTD expc<>+44(SB), Y5
	VPADDD Y5, Y3, Y3
	VPSLLD $23, Y3, Y3          // 2^n
	VMULPS Y3, Y4, Y4
	VANDNPS Y4, Y1, Y4          // 0 where x < -87.3
	VMOVUPS Y4, (DI)
	VADDPS Y4, Y9, Y9
	ADDQ $32, DI
	CMPQ DI, CX
	JB loop

done:
	VEXTRACTF128 $1, Y9, X0
	VADDPS X0, X9, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, sum+24(FP)
	VZEROUPPER
	RET

// func sgemm4x16(k int, a *float32, rs, ts int, b *float32, ldb int, c *float32, ldc int, alpha float32)
//
// For rows r < 4 and columns x < 16: C[r*ldc + x] += alpha * Σ_{t<k}
// A[r*rs + t*ts] · B[t*ldb + x]. With rs = lda, ts = 1 this is C += A·B; with
// rs = 1, ts = lda it is C += Aᵀ·B, so neither operand is transposed in
// memory. Each step broadcasts the four A values and multiplies them into
// two 8-wide halves of the B row: eight ymm accumulators. Needs AVX2, FMA.
TEXT ·sgemm4x16(SB), NOSPLIT, $0-68
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), R8
	MOVQ rs+16(FP), AX
	SHLQ $2, AX
	LEAQ (R8)(AX*1), R9
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	MOVQ ts+24(FP), R12
	SHLQ $2, R12
	MOVQ b+32(FP), DI
	MOVQ ldb+40(FP), R13
	SHLQ $2, R13
	MOVQ c+48(FP), DX
	MOVQ ldc+56(FP), R14
	SHLQ $2, R14
	ZERO8
	TESTQ CX, CX
	JZ store

step:
	VMOVUPS (DI), Y12
	VMOVUPS 32(DI), Y13
	VBROADCASTSS (R8), Y14
	VFMADD231PS Y12, Y14, Y0
	VFMADD231PS Y13, Y14, Y1
	VBROADCASTSS (R9), Y15
	VFMADD231PS Y12, Y15, Y2
	VFMADD231PS Y13, Y15, Y3
	VBROADCASTSS (R10), Y14
	VFMADD231PS Y12, Y14, Y4
	VFMADD231PS Y13, Y14, Y5
	VBROADCASTSS (R11), Y15
	VFMADD231PS Y12, Y15, Y6
	VFMADD231PS Y13, Y15, Y7
	ADDQ R12, R8
	ADDQ R12, R9
	ADDQ R12, R10
	ADDQ R12, R11
	ADDQ R13, DI
	DECQ CX
	JNZ step

store:
	VBROADCASTSS alpha+64(FP), Y14
	ROW16(Y0, Y1)
	ADDQ R14, DX
	ROW16(Y2, Y3)
	ADDQ R14, DX
	ROW16(Y4, Y5)
	ADDQ R14, DX
	ROW16(Y6, Y7)
	VZEROUPPER
	RET

// func sgemm6x16(k int, ap, bp, c *float32, ldc int, alpha float32)
// C[0:6, 0:16] += alpha · Σ_p ap[p·6+i]·bp[p·16+j]; requires AVX2 and FMA.
// Twelve ymm accumulators (6 rows × two 8-wide halves), two for the B row,
// two alternating for broadcasts of A.
TEXT ·sgemm6x16(SB), NOSPLIT, $0-44
	MOVQ k+0(FP), CX
	MOVQ ap+8(FP), SI
	MOVQ bp+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	ZERO8
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JZ store

loop:
	VMOVUPS (DI), Y12
	VMOVUPS 32(DI), Y13
	VBROADCASTSS (SI), Y14
	VFMADD231PS Y12, Y14, Y0
	VFMADD231PS Y13, Y14, Y1
	VBROADCASTSS 4(SI), Y15
	VFMADD231PS Y12, Y15, Y2
	VFMADD231PS Y13, Y15, Y3
	VBROADCASTSS 8(SI), Y14
	VFMADD231PS Y12, Y14, Y4
	VFMADD231PS Y13, Y14, Y5
	VBROADCASTSS 12(SI), Y15
	VFMADD231PS Y12, Y15, Y6
	VFMADD231PS Y13, Y15, Y7
	VBROADCASTSS 16(SI), Y14
	VFMADD231PS Y12, Y14, Y8
	VFMADD231PS Y13, Y14, Y9
	VBROADCASTSS 20(SI), Y15
	VFMADD231PS Y12, Y15, Y10
	VFMADD231PS Y13, Y15, Y11
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNZ loop

store:
	VBROADCASTSS alpha+40(FP), Y14
	ROW16(Y0, Y1)
	ADDQ R8, DX
	ROW16(Y2, Y3)
	ADDQ R8, DX
	ROW16(Y4, Y5)
	ADDQ R8, DX
	ROW16(Y6, Y7)
	ADDQ R8, DX
	ROW16(Y8, Y9)
	ADDQ R8, DX
	ROW16(Y10, Y11)
	VZEROUPPER
	RET

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
	ZERO8
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
