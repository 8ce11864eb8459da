// flex_wgmma.cuh: Hopper warpgroup MMA (wgmma.mma_async, sm_90a) for the
// Hopper flex kernels. Each wrapper names every accumulator register as
// its own asm operand, and the numbers of the operands after them depend on
// the width: the operand lists are spelled out once (each width's list
// extends the one before) and one macro, FLEX_WGMMA, defines the wrappers
// of every width. TestWgmmaOperands (kernels/wgmma_test.go) expands the
// macros with g++ and checks every wrapper's operands.
//
// A warpgroup is 4 consecutive warps (128 threads) starting at a warp index
// divisible by 4. The m64nNk16 accumulator of thread t (warp w = t/32 of the
// group, lane l) holds d[n*4 + e] = D[16w + l/4 + 8(e/2)][8n + 2(l%4) + e%2]:
// the mma.sync m16n8 layout, one 16-row slice per warp, repeated along N.
// A from registers uses the mma.sync m16n8k16 A fragment of the warp's rows.
//
// Shared-memory operands are described by flex_wg_desc (flex_common.cuh).
#pragma once

// FLEX_WG_ACC<R>: the asm operands "%0, ..., %<R-1>" of R accumulator
// registers; FLEX_WG_D<R>: their constraints "+f"(d[0]), ..., "+f"(d[R-1]).
#define FLEX_WG_ACC16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FLEX_WG_D16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FLEX_WG_ACC32 FLEX_WG_ACC16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FLEX_WG_D32 FLEX_WG_D16, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FLEX_WG_ACC64 FLEX_WG_ACC32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FLEX_WG_D64 FLEX_WG_D32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FLEX_WG_ACC128 FLEX_WG_ACC64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FLEX_WG_D128 FLEX_WG_D64, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// FLEX_WGMMA(N, R, R1, ..., R6) defines, for m64nNk16 with R = N/2
// accumulator registers per thread (R1..R6 = R+1..R+6, the numbers of the
// operands after them):
//   flex_wgmma_ssN<TA, TB>(d, da, db, acc): d[R] (+)= A(64x16, smem) * B(16xN, smem);
//   flex_wgmma_rsN<TB>(d, a, db, acc):      d[R] (+)= A(64x16, registers a[4]) * B(16xN, smem);
// acc 0 overwrites d. TA, TB: 1 reads the operand transposed.
#define FLEX_WGMMA(N, R, R1, R2, R3, R4, R5, R6) \
  template <int TA, int TB> \
  __device__ __forceinline__ void flex_wgmma_ss##N(float (&d)[R], unsigned long long da, unsigned long long db, int acc) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #R2 ", 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." FLEX_PTX_AB "." FLEX_PTX_AB " " \
                 "{" FLEX_WG_ACC##R "}, %" #R ", %" #R1 ", p, 1, 1, %" #R3 ", %" #R4 ";\n}\n" \
                 : FLEX_WG_D##R \
                 : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB)); \
  } \
  template <int TB> \
  __device__ __forceinline__ void flex_wgmma_rs##N(float (&d)[R], const unsigned (&a)[4], unsigned long long db, int acc) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #R5 ", 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." FLEX_PTX_AB "." FLEX_PTX_AB " " \
                 "{" FLEX_WG_ACC##R "}, {%" #R ", %" #R1 ", %" #R2 ", %" #R3 "}, %" #R4 ", p, 1, 1, %" #R6 ";\n}\n" \
                 : FLEX_WG_D##R \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB)); \
  }
FLEX_WGMMA(32, 16, 17, 18, 19, 20, 21, 22)
FLEX_WGMMA(64, 32, 33, 34, 35, 36, 37, 38)
FLEX_WGMMA(128, 64, 65, 66, 67, 68, 69, 70)
FLEX_WGMMA(256, 128, 129, 130, 131, 132, 133, 134)

// flex_wgmma_ss and flex_wgmma_rs pick the wrapper of width N at compile time.
#define FLEX_WG_PICK(KIND, TARGS, ARGS) \
  if constexpr (N == 32) flex_wgmma_##KIND##32<FLEX_WG_LIST TARGS> ARGS; \
  else if constexpr (N == 64) flex_wgmma_##KIND##64<FLEX_WG_LIST TARGS> ARGS; \
  else if constexpr (N == 128) flex_wgmma_##KIND##128<FLEX_WG_LIST TARGS> ARGS; \
  else if constexpr (N == 256) flex_wgmma_##KIND##256<FLEX_WG_LIST TARGS> ARGS
#define FLEX_WG_LIST(...) __VA_ARGS__ // (TA, TB) -> TA, TB
template <int N, int TA, int TB>
__device__ __forceinline__ void flex_wgmma_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db, int acc) {
  FLEX_WG_PICK(ss, (TA, TB), (d, da, db, acc));
}
template <int N, int TB>
__device__ __forceinline__ void flex_wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db, int acc) {
  FLEX_WG_PICK(rs, (TB), (d, a, db, acc));
}
