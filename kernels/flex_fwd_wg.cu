// flex_fwd_wg.cu: block-sparse flex attention forward on Hopper warpgroup
// MMA (v6; sm_90a). Same contract, parameters and grid as flex_fwd.cu v4:
//
//   out[b,h,i,:] = sum_j softmax_j(score(q_i . k_j * scale) | mask) v_j
//   lse[b,h,i]   = log sum_{j allowed} exp(score(q_i . k_j * scale))
//
// One CTA computes FLEX_BQ query rows of one (batch, query head); each
// warpgroup (128 threads) owns 64 rows. Per kv tile of FLEX_WG_BN rows:
// S = Q K^T is one chain of wgmma m64nBNk16 with Q and K read from shared
// memory; the online softmax runs on the accumulators; P is packed into
// registers and O += P V is a chain of wgmma m64nDk16 with P from registers
// and V read transposed from shared memory. K runs one tile ahead of V
// through two cp.async stages each, so that tile t+1's QK^T product runs on
// the tensor cores while tile t's softmax runs on the other units. Only the non-empty kv blocks are visited,
// the partial ones first (mask per element), then the full ones (no mask).
// GQA: query head h reads kv head h / FLEX_GROUP (no copies).
//
// Builds alone: nvcc -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -cubin kernels/flex_fwd_wg.cu
#include "flex_common.cuh"
#include "flex_wgmma.cuh"

#ifndef FLEX_WG_BN
// kv rows per tile (N of the S product): 64 at head dim 256, where O takes
// 128 registers per thread
#define FLEX_WG_BN (FLEX_D == 256 ? 64 : 128)
#endif
#define FLEX_WG_NWG (FLEX_BQ / 64)
#define FLEX_WG_NT (FLEX_WG_NWG * 128)

static_assert(FLEX_D == 64 || FLEX_D == 128 || FLEX_D == 256, "v6 forward: head dim 64, 128 or 256");
static_assert(FLEX_BQ % 64 == 0, "v6 forward: q block is whole warpgroups of 64 rows");
static_assert(FLEX_BKV % FLEX_WG_BN == 0, "kv block must be a multiple of BN");

// The S and O products. S: A = Q rows [64 wg, +64) (K-major), B = K tile
// (K-major); k step kk covers head-dim columns [16kk, +16).
__device__ __forceinline__ void flex_wg_qk(float (&s)[FLEX_WG_BN / 2],
                                           const flex_t *sQ, const flex_t *sK,
                                           int wg) {
#pragma unroll
  for (int kk = 0; kk < FLEX_D / 16; kk++) {
    const flex_t *a = sQ + (kk >> 2) * FLEX_BQ * 64 + wg * 64 * 64 + (kk & 3) * 16;
    const flex_t *b = sK + (kk >> 2) * FLEX_WG_BN * 64 + (kk & 3) * 16;
#if FLEX_WG_BN == 128
    flex_wgmma_ss128<0, 0>(s, flex_wg_desc(a, 16, 1024), flex_wg_desc(b, 16, 1024), kk > 0);
#elif FLEX_WG_BN == 64
    flex_wgmma_ss64<0, 0>(s, flex_wg_desc(a, 16, 1024), flex_wg_desc(b, 16, 1024), kk > 0);
#else
#error "FLEX_WG_BN must be 64 or 128"
#endif
  }
}

// O += P V: A = P (registers, k step kk = kv rows [16kk, +16)), B = V tile
// rows [16kk, +16) read MN-major (head dim contiguous): 8-row groups 1024
// bytes apart, 64-column atoms FLEX_WG_BN*128 bytes apart.
__device__ __forceinline__ void flex_wg_pv(float (&o)[FLEX_D / 2],
                                           const unsigned (&p)[FLEX_WG_BN / 16][4],
                                           const flex_t *sV) {
#pragma unroll
  for (int kk = 0; kk < FLEX_WG_BN / 16; kk++) {
    const unsigned long long db = flex_wg_desc(sV + kk * 16 * 64, FLEX_WG_BN * 128, 1024);
#if FLEX_D == 256
    flex_wgmma_rs256<1>(o, p[kk], db, 1);
#elif FLEX_D == 128
    flex_wgmma_rs128<1>(o, p[kk], db, 1);
#else
    flex_wgmma_rs64<1>(o, p[kk], db, 1);
#endif
  }
}

extern "C" __global__ void __launch_bounds__(FLEX_WG_NT, 1)
    flex_fwd(FLEX_FWD_PARAMS FLEX_ARG_PARAMS) {
  const FlexArgs args = {{FLEX_ARG_VALUES}};
  constexpr int D = FLEX_D, BQ = FLEX_BQ, BN = FLEX_WG_BN, NT = FLEX_WG_NT;
  constexpr int NTILE = BN / 8; // n8 column groups of S
  constexpr int DT = D / 8;     // n8 column groups of O
  constexpr int SUB = FLEX_BKV / BN;

  extern __shared__ __align__(1024) unsigned char flex_smem_raw[];
  // wgmma's swizzle needs 1024-byte aligned tiles (FwdResources adds the slack).
  unsigned char *flex_smem = flex_smem_raw + ((1024 - (flex_smem_addr(flex_smem_raw) & 1023)) & 1023);
  flex_t *sQ = (flex_t *)flex_smem;
  flex_t *sK = sQ + BQ * D;     // [2][BN*D]: K of tiles t+1 and t+2
  flex_t *sV = sK + 2 * BN * D; // [2][BN*D]: V of tiles t and t+1
  int *sIdx = (int *)(sV + 2 * BN * D);

  const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7;
  const int wq = (tid >> 5) & 3; // warp within the warpgroup
  // Grid (heads x batch, q blocks), heaviest q blocks of every head first
  // (q blocks fastest lifts case (a)'s L2 hit rate from 42% to 86% but
  // measured 4% slower: the kernel is not bound by memory).
  const int qb = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x % heads_q, b = blockIdx.x / heads_q;
  const int hk = h / FLEX_GROUP;
  const int heads_kv = heads_q / FLEX_GROUP;
  const int q0 = qb * BQ;

  const flex_t *gQ = Q + ((long long)(b * heads_q + h) * lenq) * D;
  const flex_t *gK = K + ((long long)(b * heads_kv + hk) * lenkv) * D;
  const flex_t *gV = V + ((long long)(b * heads_kv + hk) * lenkv) * D;

  // The block list moves to shared memory once, off the loop's critical path.
  const FlexBlocks blk = flex_blocks(sIdx, kv_num, kv_idx, full_num, full_idx, b, h, qb,
                                     bm_batch, bm_heads, nqb, nkvb, tid, NT);
  const int ntiles = (blk.npart + blk.nfull) * SUB;

  auto tile_start = [&](int t, bool &full) { return blk.start<FLEX_BKV, BN>(t, full); };
  // loadK and loadV queue tile t's K or V into stage t % 2 (nothing past
  // the last tile). K runs one tile ahead of V: while tile t is processed,
  // K of tile t+1 feeds the next scores and V of tile t the PV product.
  auto loadK = [&](int t) {
    if (t < ntiles) {
      bool f;
      flex_wg_load<BN, NT>(sK + (t & 1) * BN * D, gK, tile_start(t, f), lenkv, tid);
    }
  };
  auto loadV = [&](int t) {
    if (t < ntiles) {
      bool f;
      flex_wg_load<BN, NT>(sV + (t & 1) * BN * D, gV, tile_start(t, f), lenkv, tid);
    }
  };

  // Prologue: Q, K0, V0 and K1 in one group; S_0 computed.
  flex_wg_load<BQ, NT>(sQ, gQ, q0, lenq, tid);
  loadK(0);
  loadV(0);
  loadK(1);
  flex_cp_commit();
  flex_cp_wait<0>();
  flex_fence_async();
  __syncthreads();

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; i++)
    o[i] = 0.f;
  float m0 = FLEX_NEG_INF, m1 = FLEX_NEG_INF, l0 = 0.f, l1 = 0.f;
  const int r0 = q0 + wg * 64 + wq * 16 + (lane >> 2), r1 = r0 + 8;
  const float sl2 = scale * FLEX_LOG2E;

  float sa[BN / 2], sb[BN / 2];
  if (ntiles > 0) {
    flex_wg_fence();
    flex_wg_qk(sa, sQ, sK, wg);
    flex_wg_commit();
    flex_wg_wait<0>();
  }

  // step handles tile t whose scores are in sc, while the tensor cores
  // compute tile t+1's scores into sn: the softmax of one tile overlaps the
  // next tile's QK^T product.
  auto step = [&](float (&sc)[BN / 2], float (&sn)[BN / 2], int t) {
    flex_cp_wait<0>(); // K of tile t+1 and V of tile t have landed
    flex_fence_async();
    __syncthreads();   // and every warp is done with K of t, V of t-1
    loadK(t + 2);      // into those stages
    loadV(t + 1);
    flex_cp_commit();
    // Issued unconditionally (past the last tile the product is not read):
    // a conditional wgmma makes ptxas serialize them all (C7515).
    flex_wg_fence();
    flex_wg_qk(sn, sQ, sK + ((t + 1) & 1) * BN * D, wg);
    flex_wg_commit();
    bool full;
    const int kv0 = tile_start(t, full);
    // Masked scores; sc[n*4+e] is row r0 (e < 2) or r1, column
    // kv0 + 8n + 2(lane%4) + e%2. Identity score: raw dot products, scaled
    // inside the exponent; score programs: their log2-domain value.
    float mx0 = FLEX_NEG_INF, mx1 = FLEX_NEG_INF;
    // (A branch skipping this loop for full tiles inside both lengths makes
    // the kernels with mask programs spill: measured with ptxas 12.4.)
#pragma unroll
    for (int n = 0; n < NTILE; n++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int row = e < 2 ? r0 : r1;
        const int col = kv0 + n * 8 + (lane & 3) * 2 + (e & 1);
        const bool ok = full ? (col < lenkv && row < lenq)
                             : flex_allowed(args, b, h, row, col, lenq, lenkv);
#if FLEX_HAS_SCORE
        sc[n * 4 + e] = ok ? flex_score(args, sc[n * 4 + e] * scale, b, h, row, col) * FLEX_LOG2E : FLEX_NEG_INF;
#else
        sc[n * 4 + e] = ok ? sc[n * 4 + e] : FLEX_NEG_INF;
#endif
      }
    }
#pragma unroll
    for (int n = 0; n < NTILE; n++) {
      mx0 = fmaxf(mx0, fmaxf(sc[n * 4], sc[n * 4 + 1]));
      mx1 = fmaxf(mx1, fmaxf(sc[n * 4 + 2], sc[n * 4 + 3]));
    }
#if FLEX_HAS_SCORE
    constexpr float xs = 1.f;
#else
    const float xs = sl2;
#endif
    mx0 = flex_quad_max(mx0) * xs;
    mx1 = flex_quad_max(mx1) * xs;
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float ms0 = mn0 == FLEX_NEG_INF ? 0.f : mn0;
    const float ms1 = mn1 == FLEX_NEG_INF ? 0.f : mn1;
    const float c0 = flex_ex2(m0 - ms0), c1 = flex_ex2(m1 - ms1);
    m0 = mn0;
    m1 = mn1;
    float ps0 = 0.f, ps1 = 0.f;
    unsigned p[BN / 16][4];
#pragma unroll
    for (int n = 0; n < NTILE; n++) {
      const float e0 = flex_ex2(fmaf(sc[n * 4], xs, -ms0)), e1 = flex_ex2(fmaf(sc[n * 4 + 1], xs, -ms0));
      const float e2 = flex_ex2(fmaf(sc[n * 4 + 2], xs, -ms1)), e3 = flex_ex2(fmaf(sc[n * 4 + 3], xs, -ms1));
      ps0 += e0 + e1;
      ps1 += e2 + e3;
      // A fragment of k step n/2: registers {0,1} from n even, {2,3} from n odd.
      p[n >> 1][(n & 1) * 2] = flex_pack2(e0, e1);
      p[n >> 1][(n & 1) * 2 + 1] = flex_pack2(e2, e3);
    }
    l0 = l0 * c0 + ps0; // quad-partial sums; reduced at the end
    l1 = l1 * c1 + ps1;
#pragma unroll
    for (int i = 0; i < DT; i++) {
      o[i * 4] *= c0;
      o[i * 4 + 1] *= c0;
      o[i * 4 + 2] *= c1;
      o[i * 4 + 3] *= c1;
    }
    flex_wg_fence();
    flex_wg_pv(o, p, sV + (t & 1) * BN * D);
    flex_wg_commit();
    flex_wg_wait<0>(); // this tile's PV and the next tile's scores
  };
  // One step per tile, the next tile's scores copied down after it. (The
  // loop unrolled by two with the arrays swapping roles saves the copies but
  // makes the kernels with mask programs spill.)
  for (int t = 0; t < ntiles; t++) {
    step(sa, sb, t);
#pragma unroll
    for (int i = 0; i < BN / 2; i++)
      sa[i] = sb[i];
  }
  flex_cp_wait<0>();

  flex_t *gO = O + ((long long)(b * heads_q + h) * lenq) * D;
  float *gL = LSE + (long long)(b * heads_q + h) * lenq;
  const float lt0 = flex_quad_sum(l0), lt1 = flex_quad_sum(l1);
  const float inv0 = lt0 > 0.f ? 1.f / lt0 : 0.f;
  const float inv1 = lt1 > 0.f ? 1.f / lt1 : 0.f;
#pragma unroll
  for (int n = 0; n < DT; n++) {
    const int col = n * 8 + (lane & 3) * 2;
    if (r0 < lenq)
      *(unsigned *)(gO + (long long)r0 * D + col) = flex_pack2(o[n * 4] * inv0, o[n * 4 + 1] * inv0);
    if (r1 < lenq)
      *(unsigned *)(gO + (long long)r1 * D + col) = flex_pack2(o[n * 4 + 2] * inv1, o[n * 4 + 3] * inv1);
  }
  if ((lane & 3) == 0) {
    if (r0 < lenq)
      gL[r0] = lt0 > 0.f ? (m0 + __log2f(lt0)) * FLEX_LN2 : FLEX_NEG_INF;
    if (r1 < lenq)
      gL[r1] = lt1 > 0.f ? (m1 + __log2f(lt1)) * FLEX_LN2 : FLEX_NEG_INF;
  }
}

