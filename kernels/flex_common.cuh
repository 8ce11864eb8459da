// flex_common.cuh holds the pieces shared by the flex attention kernels:
// the specialisation constants, the parameter lists, the argument block and
// programs (flex_args.cuh), and tensor-core helpers (ldmatrix, mma.sync
// m16n8k16, cp.async, warpgroup MMA, TMA, bf16/fp16 packing).
//
// No CUDA headers are included so the same text compiles under nvcc and
// NVRTC alike. The Go generator (package flex/flexcuda) prepends a #define
// for every specialisation and tile constant (Spec.defines, the one place
// they are chosen) and replaces the program block of flex_args.cuh.
#pragma once

// ---- specialisation (structural only; lengths and batch are run-time) ----
// FLEX_D head dimension (64, 128, 256); FLEX_FP16 1: fp16 storage, 0: bf16;
// FLEX_GROUP query heads per kv head (GQA); FLEX_BQ, FLEX_BKV the
// BlockMask's q and kv blocks; FLEX_HAS_SCORE 1 unless the score program is
// the identity; FLEX_BWD_HALF 1 when the Hopper backward splits the head
// dimension over two CTAs per kv block (head dim 256).
#if !defined(FLEX_D) || !defined(FLEX_FP16) || !defined(FLEX_GROUP) || !defined(FLEX_BQ) || \
    !defined(FLEX_BKV) || !defined(FLEX_HAS_SCORE) || !defined(FLEX_BWD_HALF)
#error "flex_common.cuh: FLEX_D, FLEX_FP16, FLEX_GROUP, FLEX_BQ, FLEX_BKV, FLEX_HAS_SCORE and FLEX_BWD_HALF come from the generator (flex/flexcuda)"
#endif

#define FLEX_LOG2E 1.4426950408889634f
#define FLEX_LN2 0.6931471805599453f
#define FLEX_NEG_INF (-__int_as_float(0x7f800000))

typedef unsigned short flex_t; // raw bf16 / fp16 bits

// The parameters of flex_fwd and flex_bwd_dkdv, shared by every version of
// each kernel (the Go launcher fills them in this order, then the slots).
#define FLEX_FWD_PARAMS                                                        \
  const flex_t *__restrict__ Q, const flex_t *__restrict__ K,                  \
      const flex_t *__restrict__ V, flex_t *__restrict__ O,                    \
      float *__restrict__ LSE, const int *__restrict__ kv_num,                 \
      const int *__restrict__ kv_idx, const int *__restrict__ full_num,        \
      const int *__restrict__ full_idx, int heads_q, int lenq, int lenkv,      \
      int bm_batch, int bm_heads, int nqb, int nkvb, float scale, int o_hi
#define FLEX_DKDV_PARAMS                                                       \
  const flex_t *__restrict__ Q, const flex_t *__restrict__ K,                  \
      const flex_t *__restrict__ V, const flex_t *__restrict__ dO,             \
      const float *__restrict__ LSE, const float *__restrict__ Dlt,            \
      flex_dkv_t *__restrict__ dK, flex_dkv_t *__restrict__ dV,                \
      float *__restrict__ dQacc, const int *__restrict__ q_num,                \
      const int *__restrict__ q_idx, const int *__restrict__ fullq_num,        \
      const int *__restrict__ fullq_idx, int heads_q, int lenq, int lenkv,     \
      int bm_batch, int bm_heads, int nqb, int nkvb, float scale, int o_hi

// O and dO's layout is the run-time argument o_hi (flex.Dims.OutHeadsInner):
// 0: [batch, heads_q, lenq, FLEX_D] like Q; 1: [batch, lenq, heads_q,
// FLEX_D], the heads inside the rows. flex_o_head is the element offset of
// row 0 of query head h in batch b, flex_o_ld the distance between two
// consecutive rows of one head.
__device__ __forceinline__ long long flex_o_head(int b, int h, int heads_q, int lenq, int o_hi) {
  return o_hi ? ((long long)b * lenq * heads_q + h) * FLEX_D : (long long)(b * heads_q + h) * lenq * FLEX_D;
}
__device__ __forceinline__ int flex_o_ld(int heads_q, int o_hi) { return o_hi ? heads_q * FLEX_D : FLEX_D; }

// flex_bwd_half is the half of the head dimension whose dK, dV and dQ this
// CTA computes: with FLEX_BWD_HALF two CTAs share each kv block, told apart
// by the low bit of blockIdx.x; 0 otherwise.
__device__ __forceinline__ int flex_bwd_half() { return FLEX_BWD_HALF ? blockIdx.x & 1 : 0; }

// Both CTAs of a kv block compute every dS, so the score program's tensor
// gradients (the atomicAdd calls of the printed backward, see
// flex.ScoreProgram.CUDABackward) are added by half 0 only: inside the
// programs, atomicAdd is gated on the half (a no-op gate without
// FLEX_BWD_HALF).
#define atomicAdd(p, v) (flex_bwd_half() == 0 ? atomicAdd(p, v) : 0.f)
#include "flex_args.cuh"
#undef atomicAdd

// ---- conversions ----
__device__ __forceinline__ unsigned flex_pack2(float lo, float hi) {
  unsigned r;
#if FLEX_FP16
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
  return r;
}

__device__ __forceinline__ float flex_to_f32(flex_t x) {
#if FLEX_FP16
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
  return f;
#else
  return __int_as_float(((unsigned)x) << 16);
#endif
}

// flex_zero sets every element of the fp32 register array x (of any rank)
// to 0.
template <int N> __device__ __forceinline__ void flex_zero(float (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++)
    x[i] = 0.f;
}
template <class T, int N> __device__ __forceinline__ void flex_zero(T (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++)
    flex_zero(x[i]);
}

// flex_ex2 is 2^x on the special-function unit (flush to zero; 2^-inf = 0).
__device__ __forceinline__ float flex_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ---- shared memory, swizzled 16-byte chunks ----
// A tile row of FLEX_D elements is FLEX_D/8 chunks of 16 bytes; chunk c of
// row r is stored at chunk c ^ (r & 7) so that ldmatrix's eight row reads of
// one column chunk fall in distinct bank groups.
template <int W = FLEX_D>
__device__ __forceinline__ int flex_swz(int row, int chunk) {
  return row * W + ((chunk ^ (row & 7)) << 3);
}

__device__ __forceinline__ unsigned flex_smem_addr(const void *p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// flex_carve lays a kernel's regions out in its dynamic shared memory from
// p, in order (the launcher's Resources size the whole):
// flex_carve(p, a, na, b, nb, ..., last) points a at na elements, b at the
// nb after them, ..., and last at the open-ended rest (sized at launch).
template <class T> __device__ __forceinline__ void flex_carve(unsigned char *p, T *&last) {
  last = (T *)p;
}
template <class T, class... R>
__device__ __forceinline__ void flex_carve(unsigned char *p, T *&r, int n, R &&...rest) {
  r = (T *)p;
  flex_carve(p + n * sizeof(T), rest...);
}

// flex_smem_1024 returns the first 1024-byte aligned address at or after raw
// in shared memory: the 128-byte swizzle of TMA and wgmma needs 1024-byte
// aligned tiles (the Hopper kernels' Resources add the slack).
__device__ __forceinline__ unsigned char *flex_smem_1024(unsigned char *raw) {
  return raw + ((1024 - (flex_smem_addr(raw) & 1023)) & 1023);
}

// flex_cp16 copies 16 bytes global -> shared asynchronously; when valid is
// false the destination is zero-filled and src is not read.
__device__ __forceinline__ void flex_cp16(void *dst, const void *src,
                                          bool valid) {
  unsigned d = flex_smem_addr(dst);
  int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d),
               "l"(src), "r"(n));
}
__device__ __forceinline__ void flex_cp_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void flex_cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// flex_load_tile copies rows [row0, row0+ROWS) of a [len, FLEX_D] matrix
// (rows ld elements apart) into a swizzled shared tile; rows at or past len
// are zero-filled.
template <int ROWS, int NT>
__device__ __forceinline__ void flex_load_tile(flex_t *sm, const flex_t *g,
                                               int row0, int len, int tid, int ld = FLEX_D) {
  constexpr int CH = FLEX_D / 8;
  constexpr int TOTAL = ROWS * CH;
#pragma unroll
  for (int i = tid; i < TOTAL; i += NT) {
    int r = i / CH, c = i % CH;
    int gr = row0 + r;
    bool ok = gr < len;
    const flex_t *src = g + (long long)(ok ? gr : 0) * ld + c * 8;
    flex_cp16(sm + flex_swz(r, c), src, ok);
  }
}

// ---- wgmma tiles (Hopper kernels) ----
// A tile of 16-bit elements stored as [cols/64][ROWS][64] with the 128-byte
// swizzle that the warpgroup MMA's shared-memory descriptors describe
// (flex_wgmma.cuh): every row of a 64-column atom is 128 bytes, and its
// 16-byte chunk c sits at chunk c ^ (row & 7).
// flex_wg_off is the element offset of 16-byte chunk c (8 elements) of row
// r in a [FLEX_D/64][ROWS][64] tile with the 128-byte swizzle.
template <int ROWS>
__device__ __forceinline__ int flex_wg_off(int r, int c) {
  return (c >> 3) * ROWS * 64 + r * 64 + (((c & 7) ^ (r & 7)) << 3);
}

// flex_wg_off32 is the float offset of element (r, c) in an fp32 tile stored
// as [cols/32][ROWS][32] with the 128-byte swizzle of TMA (the 16-byte chunk
// c/4 of a row of 32 floats sits at chunk (c/4) ^ (r & 7)), atoms aligned to
// 1024 bytes: a warp's float2 stores of one 8-column block of a wgmma
// accumulator (8 rows x 4 column pairs) then cover every bank exactly twice.
template <int ROWS>
__device__ __forceinline__ int flex_wg_off32(int r, int c) {
  return (c >> 5) * ROWS * 32 + r * 32 + ((((c >> 2) & 7) ^ (r & 7)) << 2) + (c & 3);
}

// flex_wg_load copies rows [row0, row0+ROWS) of a [len, FLEX_D] matrix
// (rows ld elements apart) into a wgmma tile; rows at or past len are
// zero-filled.
template <int ROWS, int NT>
__device__ __forceinline__ void flex_wg_load(flex_t *sm, const flex_t *g,
                                             int row0, int len, int tid, int ld = FLEX_D) {
  constexpr int CH = FLEX_D / 8;
#pragma unroll
  for (int i = tid; i < ROWS * CH; i += NT) {
    const int r = i / CH, c = i % CH;
    const int gr = row0 + r;
    const bool ok = gr < len;
    flex_cp16(sm + flex_wg_off<ROWS>(r, c),
              g + (long long)(ok ? gr : 0) * ld + c * 8, ok);
  }
}

// ---- warpgroup MMA (Hopper kernels, sm_90a; flex_wgmma.cuh has the wrappers) ----
// Shared-memory operands are described by flex_wg_desc: 128-byte swizzle,
// tiles stored as [cols/64][rows][64] 16-bit elements, 16-byte chunk c of
// row r at chunk c ^ (r & 7), every 8-row group 1024 bytes, atoms aligned
// to 1024 bytes. K-major operands (the reduction dimension contiguous) use
// sbo = 1024; MN-major ones (transposed, trans flag 1) also give lbo, the
// byte stride between 64-column atoms along M or N.
__device__ __forceinline__ unsigned long long flex_wg_desc(const void *p, int lbo, int sbo) {
  unsigned long long a = (unsigned long long)(unsigned)__cvta_generic_to_shared(p);
  return ((a & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

__device__ __forceinline__ void flex_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void flex_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void flex_wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// flex_fence_async orders this thread's generic-proxy shared-memory writes
// (st.shared, cp.async) before later reads by the tensor cores.
__device__ __forceinline__ void flex_fence_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// flex_wg_keep marks a[] as read here, so that the compiler keeps the A
// fragments of an in-flight wgmma in their registers until after the wait
// that retires it (the asm that issued it consumed them, as far as the
// compiler knows; reusing those registers makes ptxas serialize, C7513).
__device__ __forceinline__ void flex_wg_keep(const unsigned (&a)[4]) {
  asm volatile("" ::"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]));
}

// ---- tensor memory access and mbarriers (Hopper forward, sm_90a) ----
// FlexTmap is a CUtensorMap (cuTensorMapEncodeTiled), passed by value as a
// __grid_constant__ kernel parameter; the copy engine reads it there.
struct __align__(64) FlexTmap {
  unsigned long long v[16];
};
#define FLEX_TMAP_PARAMS                                                       \
  const __grid_constant__ FlexTmap tmQ, const __grid_constant__ FlexTmap tmK,  \
      const __grid_constant__ FlexTmap tmV

__device__ __forceinline__ void flex_mbar_init(unsigned long long *bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(flex_smem_addr(bar)), "r"(count) : "memory");
}
// flex_mbar_fence_init makes initialised barriers visible to the copy
// engine (a CTA barrier must follow before they are used).
__device__ __forceinline__ void flex_mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
}
// flex_mbar_expect arrives on bar and adds bytes to the transaction count
// that the copies completing on it must deliver before its phase ends.
__device__ __forceinline__ void flex_mbar_expect(unsigned long long *bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(flex_smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void flex_mbar_arrive(unsigned long long *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(flex_smem_addr(bar)) : "memory");
}
// flex_mbar_wait returns once the phase of bar with the given parity has
// completed (a fresh barrier counts its phase of parity 1 as completed).
__device__ __forceinline__ void flex_mbar_wait(unsigned long long *bar, unsigned parity) {
  asm volatile("{\n.reg .pred p;\nFLEX_MBAR_WAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               "@!p bra FLEX_MBAR_WAIT;\n}\n" ::"r"(flex_smem_addr(bar)), "r"(parity) : "memory");
}
// flex_tma_load3 copies the box at (x, y, z) of the 3-D tensor map tm into
// shared memory at dst; its bytes complete on bar. Rows past the tensor's
// extent arrive as zeros.
__device__ __forceinline__ void flex_tma_load3(void *dst, const FlexTmap *tm, int x, int y, int z,
                                               unsigned long long *bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];\n"
               ::"r"(flex_smem_addr(dst)), "l"((unsigned long long)tm), "r"(x), "r"(y), "r"(z),
               "r"(flex_smem_addr(bar)) : "memory");
}
// flex_tma_load4 is flex_tma_load3 for a 4-D tensor map, the box at (x, y,
// z, w).
__device__ __forceinline__ void flex_tma_load4(void *dst, const FlexTmap *tm, int x, int y, int z, int w,
                                               unsigned long long *bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
               ::"r"(flex_smem_addr(dst)), "l"((unsigned long long)tm), "r"(x), "r"(y), "r"(z), "r"(w),
               "r"(flex_smem_addr(bar)) : "memory");
}
// flex_tma_reduce3 adds the fp32 box at src in shared memory into the box at
// (x, y, z) of the 3-D tensor map tm (global += shared, element by element,
// by the copy engine); elements past the tensor's extent are not written.
// It joins this thread's open bulk group (flex_bulk_commit). The writes that
// filled src must be ordered before it by flex_fence_async and a barrier.
__device__ __forceinline__ void flex_tma_reduce3(const FlexTmap *tm, int x, int y, int z, const float *src) {
  asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"
               " [%0, {%1, %2, %3}], [%4];\n"
               ::"l"((unsigned long long)tm), "r"(x), "r"(y), "r"(z), "r"(flex_smem_addr(src)) : "memory");
}
// flex_bulk_commit closes this thread's bulk group; flex_bulk_wait_read<N>
// returns once at most N of its groups still read their shared memory (the
// source may be written again), flex_bulk_wait<N> once at most N are still
// incomplete (their global writes done).
__device__ __forceinline__ void flex_bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void flex_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void flex_bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Named barriers 1 and up (0 is __syncthreads): bar.sync waits until n
// threads have arrived (bar.arrive arrives without waiting).
__device__ __forceinline__ void flex_bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void flex_bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
// setmaxnreg moves registers between the warpgroups of a CTA: the producer
// gives up what the consumers take.
template <int N> __device__ __forceinline__ void flex_regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void flex_regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- tensor cores ----
// flex_ldm_x4 loads four 8x8 b16 matrices from shared memory at p (lane
// 8i+j gives row j of matrix i) into r[0..3]; flex_ldm_x4_t transposes each.
#define FLEX_LDM_X4(NAME, TRANS)                                                          \
  __device__ __forceinline__ void NAME(unsigned (&r)[4], const flex_t *p) {               \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4" TRANS ".shared.b16 {%0,%1,%2,%3}, [%4];\n" \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                         \
                 : "r"(flex_smem_addr(p)));                                               \
  }
FLEX_LDM_X4(flex_ldm_x4, "")
FLEX_LDM_X4(flex_ldm_x4_t, ".trans")
#undef FLEX_LDM_X4

// FLEX_PTX_AB is the PTX name of the storage type, the A and B operands of
// the tensor-core instructions (mma.sync here, wgmma in flex_wgmma.cuh).
#if FLEX_FP16
#define FLEX_PTX_AB "f16"
#else
#define FLEX_PTX_AB "bf16"
#endif

// flex_mma computes d += a * b for one m16n8k16 tile, fp32 accumulate.
__device__ __forceinline__ void flex_mma(float *d, const unsigned *a,
                                         const unsigned *b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." FLEX_PTX_AB "." FLEX_PTX_AB ".f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                 "r"(b[1]));
}

// Fragment address helpers for a swizzled [rows][FLEX_D] tile. lane is the
// thread's lane; row0 and k0 (element column, multiple of 16) select the
// 16x16 sub-block.
//
// flex_a_addr: A operand (row-major [m][k]) of ldmatrix.x4 -> a0..a3.
template <int W = FLEX_D>
__device__ __forceinline__ const flex_t *flex_a_addr(const flex_t *t, int row0,
                                                     int k0, int lane) {
  int r = row0 + (lane & 15);
  int c = (k0 >> 3) + (lane >> 4);
  return t + flex_swz<W>(r, c);
}
// flex_bn_addr: B operand where the tile holds B transposed ([n][k], like K
// for S = Q K^T); x4 gives {b0,b1} of n-tile row0..+7 and of row0+8..+15.
template <int W = FLEX_D>
__device__ __forceinline__ const flex_t *flex_bn_addr(const flex_t *t, int row0,
                                                      int k0, int lane) {
  int r = row0 + (lane & 7) + ((lane >> 4) << 3);
  int c = (k0 >> 3) + ((lane >> 3) & 1);
  return t + flex_swz<W>(r, c);
}
// flex_bk_addr: B operand where the tile holds B itself ([k][n], like V for
// O = P V), for ldmatrix.x4.trans; gives {b0,b1} of n-tile n0..+7 and of
// n0+8..+15 for k rows k0..k0+15.
template <int W = FLEX_D>
__device__ __forceinline__ const flex_t *flex_bk_addr(const flex_t *t, int k0,
                                                      int n0, int lane) {
  int r = k0 + (lane & 7) + (((lane >> 3) & 1) << 3);
  int c = (n0 >> 3) + (lane >> 4);
  return t + flex_swz<W>(r, c);
}

// flex_ldm_b loads the B fragments of n-tiles n0..n0+7 and n0+8..n0+15
// for k rows k0..k0+15 from the swizzled tile t, which holds B transposed
// ([n][k], like K for S = Q K^T) when KN is false and B itself ([k][n], like
// V for O = P V) when true.
template <bool KN, int W = FLEX_D>
__device__ __forceinline__ void flex_ldm_b(unsigned (&b)[4], const flex_t *t, int k0, int n0,
                                           int lane) {
  if constexpr (KN)
    flex_ldm_x4_t(b, flex_bk_addr<W>(t, k0, n0, lane));
  else
    flex_ldm_x4(b, flex_bn_addr<W>(t, n0, k0, lane));
}

// flex_mma2 adds a times the two n8 tiles of a flex_ldm_b fragment pair b
// to d[0] and d[1].
__device__ __forceinline__ void flex_mma2(float (*d)[4], const unsigned *a, const unsigned (&b)[4]) {
  flex_mma(d[0], a, b);
  flex_mma(d[1], a, b + 2);
}

// flex_mma_rows adds A B to d[0..MT) for MT row tiles of 16 rows and NT n8
// tiles, k = 16: a[0..MT) holds the row tiles' A fragments, B (columns from
// n0) is read from t as flex_ldm_b reads it, and every B fragment feeds all
// MT row tiles.
template <int MT, int NT, bool KN, int W = FLEX_D>
__device__ __forceinline__ void flex_mma_rows(float (*d)[NT][4], const unsigned (*a)[4],
                                              const flex_t *t, int k0, int n0, int lane) {
#pragma unroll
  for (int n = 0; n < NT; n += 2) {
    unsigned bb[4];
    flex_ldm_b<KN, W>(bb, t, k0, n0 + n * 8, lane);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
      flex_mma2(d[mt] + n, a[mt], bb);
  }
}

// flex_frag_a packs the fp32 accumulators of two n8 tiles of a 16-row tile
// (columns 0-7 in c0, 8-15 in c1) into the A fragment of a product whose k
// is those 16 columns (P of S = Q K^T becomes the A operand of O = P V).
__device__ __forceinline__ void flex_frag_a(unsigned (&a)[4], const float (&c0)[4],
                                            const float (&c1)[4]) {
  a[0] = flex_pack2(c0[0], c0[1]);
  a[1] = flex_pack2(c0[2], c0[3]);
  a[2] = flex_pack2(c1[0], c1[1]);
  a[3] = flex_pack2(c1[2], c1[3]);
}

__device__ __forceinline__ float flex_quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
  return x;
}
__device__ __forceinline__ float flex_quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  x += __shfl_xor_sync(0xffffffff, x, 2);
  return x;
}

// FlexBlocks is one BlockMask row's visit list, copied to shared memory:
// the partial blocks (mask evaluated per element) first, then the full ones.
struct FlexBlocks {
  const int *idx; // block ids, shared memory
  int npart, nfull;
  // start returns the first row of tile t when the list is walked in tiles
  // of ROWS rows (BLOCK / ROWS tiles per block), and whether its block is full.
  template <int BLOCK, int ROWS>
  __device__ __forceinline__ int start(int t, bool &full) const {
    constexpr int SUB = BLOCK / ROWS;
    const int j = t / SUB;
    full = j >= npart;
    return idx[j] * BLOCK + (t % SUB) * ROWS;
  }
  // tiles is the number of tiles of ROWS rows in the list.
  template <int BLOCK, int ROWS> __device__ __forceinline__ int tiles() const {
    return (npart + nfull) * (BLOCK / ROWS);
  }
};

// flex_blocks copies row i (of nrows) of batch b, head h of a block mask
// of bm_batch x bm_heads (1 broadcasts) into sIdx; the lists (num, idx:
// partial; fnum, fidx: full) hold up to ncols ids per row. Every thread of
// the CTA calls it (it ends with a barrier).
__device__ __forceinline__ FlexBlocks flex_blocks(int *sIdx, const int *num, const int *idx,
                                                  const int *fnum, const int *fidx, int b, int h,
                                                  int i, int bm_batch, int bm_heads, int nrows,
                                                  int ncols, int tid, int nt) {
  const int row = ((bm_batch == 1 ? 0 : b) * bm_heads + (bm_heads == 1 ? 0 : h)) * nrows + i;
  const int np = num[row], nf = fnum[row];
  const int *p = idx + (long long)row * ncols, *f = fidx + (long long)row * ncols;
  for (int k = tid; k < np + nf; k += nt)
    sIdx[k] = k < np ? p[k] : f[k - np];
  __syncthreads();
  return FlexBlocks{sIdx, np, nf};
}

// FlexQBlock is the work of a CTA of a q-parallel kernel (flex_fwd,
// flex_bwd_dq) on the grid (heads_q x batch, q blocks): q block qb, first row
// q0, of query head h (kv head hk of heads_kv) in batch b. The heaviest q
// blocks (largest index under causal-like masks) of every head go first.
struct FlexQBlock {
  int qb, h, b, hk, heads_kv, q0;
};
__device__ __forceinline__ FlexQBlock flex_q_block(int heads_q) {
  const int qb = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x % heads_q, b = blockIdx.x / heads_q;
  return FlexQBlock{qb, h, b, h / FLEX_GROUP, heads_q / FLEX_GROUP, qb * FLEX_BQ};
}

// FlexKVStream streams the ntiles kv tiles (BN rows each) of the list blk
// of a q-parallel kernel from K and V (gK, gV: the kv head's rows) through
// the double-buffered shared tiles sK and sV ([2][BN][FLEX_D] each) with
// cp.async, NT threads.
template <int BN, int NT> struct FlexKVStream {
  flex_t *sK, *sV;
  const flex_t *gK, *gV;
  FlexBlocks blk;
  int ntiles, lenkv, tid;
  // prefetch starts the copies of tile t into stage st and commits them with
  // the copies issued before (an empty group when t is past the list).
  __device__ __forceinline__ void prefetch(int t, int st) const {
    if (t < ntiles) {
      bool f;
      const int kv0 = blk.start<FLEX_BKV, BN>(t, f);
      flex_load_tile<BN, NT>(sK + st * BN * FLEX_D, gK, kv0, lenkv, tid);
      flex_load_tile<BN, NT>(sV + st * BN * FLEX_D, gV, kv0, lenkv, tid);
    }
    flex_cp_commit();
  }
  // begin prefetches tile t + 1 and waits, with every thread, until tile t
  // is in stage t & 1; it returns the tile's first kv row and whether its
  // block is full.
  __device__ __forceinline__ int begin(int t, bool &full) const {
    const int kv0 = blk.start<FLEX_BKV, BN>(t, full);
    prefetch(t + 1, (t & 1) ^ 1);
    flex_cp_wait<1>();
    __syncthreads();
    return kv0;
  }
};

// flex_acc_col is the column of element e of n8 tile n in a thread's
// mma.sync m16n8 accumulator (and wgmma's, which repeats it along N): rows
// lane/4 (e < 2) and lane/4 + 8, columns 8n + 2 (lane % 4) + e % 2.
__device__ __forceinline__ int flex_acc_col(int n, int e, int lane) {
  return n * 8 + (lane & 3) * 2 + (e & 1);
}

// flex_allowed evaluates the mask for one element with bounds: pairs outside
// [0,lenq) x [0,lenkv) are never allowed. The program runs for them too
// (generated programs clamp every tensor index and guard every division, so
// any pair is safe) and its result is dropped: evaluated unconditionally,
// its tensor reads that depend on the row only are loaded once per row of a
// tile rather than once per element under a per-element condition.
__device__ __forceinline__ bool flex_allowed(const FlexArgs &A, int b, int h,
                                             int q, int kv, int lenq,
                                             int lenkv) {
  return (q < lenq) & (kv < lenkv) & flex_mask(A, b, h, q, kv);
}

// flex_ok is whether the pair (q, kv) takes part in a tile: its bounds in a
// full block, flex_allowed in a partial one.
__device__ __forceinline__ bool flex_ok(const FlexArgs &A, bool full, int b, int h, int q, int kv,
                                        int lenq, int lenkv) {
  return full ? (q < lenq && kv < lenkv) : flex_allowed(A, b, h, q, kv, lenq, lenkv);
}
