// flex_bwd.cu: block-sparse flex attention backward (FlashAttention-2 style).
//
// With P = exp(S*scale - lse) (masked entries 0), dO the upstream gradient:
//   Dlt_i = sum_d dO_id O_id                          (flex_bwd_pre)
//   dV_j  = sum_i P_ij dO_i
//   dS_ij = P_ij (dO_i . V_j - Dlt_i)
//   dK_j  = scale sum_i dS_ij Q_i                      (flex_bwd_dkdv)
//   dQ_i  = scale sum_j dS_ij K_j                      (fp32 atomics in dkdv,
//                             or FLEX_DQ_ATOMIC 0: flex_bwd_dq, no atomics)
// flex_bwd_dkdv here is the portable kernel (mma.sync, sm_80 and later;
// FLEX_BWD_WG 1 selects the Hopper one, flex_bwd_wg.cuh): one CTA per (kv
// block, kv head, batch) on the grid (kv heads, kv blocks, batch), so that
// the heaviest kv blocks (lowest index under causal-like masks) of every
// head are dispatched first; each warp owns 16 kv rows. It loops over the
// query heads of its GQA group and, per head, over the q blocks of the
// transposed (q-side) lists, accumulating dK and dV for the whole group in
// registers: no K/V copies. With GQA, FLEX_BWD_SPLIT gives each query head
// its own CTA instead (see below).
// A score program score'(s) enters as P = exp(score'(s) - lse) and
// dS = P (dP - Dlt) score''(s); its tensors' gradients are added atomically.
//
// Tiles (flex/flexcuda Spec.defines): FLEX_BWD_NT threads of flex_bwd_dkdv,
// FLEX_BMQ q rows per stage, FLEX_BWD_PRE_ROWS rows per CTA of flex_bwd_pre;
// FLEX_BWD_SPLIT:
//   0: one CTA per kv head;
//   1 (GQA): one CTA per (kv block, query head), so a heavy kv block's work
//      is spread over FLEX_GROUP CTAs; dK and dV are then added with fp32
//      atomics into zeroed workspaces (dK, dV arguments are float*) that
//      flex_bwd_dq_convert turns into the storage type;
//   2 (deterministic, GQA): the same grid, but each CTA stores its query
//      head's fp32 dK, dV into its own slice of [FLEX_GROUP][batch][kv heads]
//      [lenkv][D] workspaces (every element written once, no atomics), and
//      flex_bwd_group_sum adds the slices in a fixed order.
#include "flex_common.cuh"

#if !defined(FLEX_BWD_WG) || !defined(FLEX_BWD_NT) || !defined(FLEX_BMQ) || !defined(FLEX_BWD_PRE_ROWS) || \
    !defined(FLEX_BWD_SPLIT) || !defined(FLEX_DQ_ATOMIC)
#error "flex_bwd.cu: FLEX_BWD_WG, FLEX_BWD_NT, FLEX_BMQ, FLEX_BWD_PRE_ROWS, FLEX_BWD_SPLIT and FLEX_DQ_ATOMIC come from the generator (flex/flexcuda)"
#endif
#if FLEX_BWD_SPLIT
typedef float flex_dkv_t;
#else
typedef flex_t flex_dkv_t;
#endif
#define FLEX_BWD_WARPS (FLEX_BWD_NT / 32)
static_assert(FLEX_BQ % FLEX_BMQ == 0, "q block must be a multiple of BMQ");
static_assert(FLEX_BWD_PRE_ROWS * (FLEX_D / 8) == 256, "flex_bwd_pre: 256 threads, one per 8 elements of a row");

// flex_bwd_pre computes Dlt = rowsum(dO * O) in fp32 for every row, and
// zeroes the fp32 dQ accumulator when dqacc is not null.
extern "C" __global__ void __launch_bounds__(256)
    flex_bwd_pre(const flex_t *__restrict__ O, const flex_t *__restrict__ dO,
                 float *__restrict__ Dlt, float *__restrict__ dqacc,
                 long long rows) {
  constexpr int CH = FLEX_D / 8;
  constexpr int RPB = FLEX_BWD_PRE_ROWS; // rows per CTA
  const int tid = threadIdx.x;
  const long long row = (long long)blockIdx.x * RPB + tid / CH;
  const int c = tid % CH;
  float acc = 0.f;
  if (row < rows) {
    const uint4 o = *(const uint4 *)(O + row * FLEX_D + c * 8);
    const uint4 g = *(const uint4 *)(dO + row * FLEX_D + c * 8);
    const unsigned ov[4] = {o.x, o.y, o.z, o.w};
    const unsigned gv[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      acc += flex_to_f32(ov[i] & 0xffff) * flex_to_f32(gv[i] & 0xffff);
      acc += flex_to_f32(ov[i] >> 16) * flex_to_f32(gv[i] >> 16);
    }
    if (dqacc) {
      float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
      *(float4 *)(dqacc + row * FLEX_D + c * 8) = z;
      *(float4 *)(dqacc + row * FLEX_D + c * 8 + 4) = z;
    }
  }
#pragma unroll
  for (int off = CH / 2; off > 0; off >>= 1)
    acc += __shfl_xor_sync(0xffffffff, acc, off);
  if (row < rows && c == 0)
    Dlt[row] = acc;
}

// flex_load_vec copies n floats (n a multiple of 4) from g[row0..] into sm,
// zero-filling rows at or past len.
__device__ __forceinline__ void flex_load_vec(float *sm, const float *g,
                                              int row0, int n, int len,
                                              int tid) {
  if (tid < n / 4) {
    int r = row0 + tid * 4;
    // rows are 16-byte aligned only when len % 4 == 0; copy singly otherwise
    if (r + 3 < len && (((unsigned long long)(g + r)) & 15) == 0) {
      flex_cp16(sm + tid * 4, g + r, true);
    } else {
#pragma unroll
      for (int e = 0; e < 4; e++)
        sm[tid * 4 + e] = r + e < len ? g[r + e] : 0.f;
    }
  }
}

// flex_bwd_recompute computes the backward's S and dP products for a warp's
// 16 rows [wrow, +16) of A1 and A2 and the NTILE*8 rows of B1 and B2 (all
// swizzled [rows][FLEX_D] tiles, k = the head dimension), fp32:
//   s = A1 B1^T,  dp = A2 B2^T
// flex_bwd_dkdv: S^T = K Q^T, dP^T = V dO^T; flex_bwd_dq: S = Q K^T, dP = dO V^T.
template <int NTILE>
__device__ __forceinline__ void flex_bwd_recompute(float (&s)[NTILE][4], float (&dp)[NTILE][4],
                                                   const flex_t *a1, const flex_t *b1,
                                                   const flex_t *a2, const flex_t *b2,
                                                   int wrow, int lane) {
#pragma unroll
  for (int n = 0; n < NTILE; n++)
#pragma unroll
    for (int e = 0; e < 4; e++)
      s[n][e] = dp[n][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < FLEX_D / 16; kk++) {
    unsigned a[4], a2f[4];
    flex_ldm_x4(a[0], a[1], a[2], a[3], flex_a_addr(a1, wrow, kk * 16, lane));
    flex_ldm_x4(a2f[0], a2f[1], a2f[2], a2f[3], flex_a_addr(a2, wrow, kk * 16, lane));
#pragma unroll
    for (int n = 0; n < NTILE; n += 2) {
      unsigned bb[4];
      flex_ldm_x4(bb[0], bb[1], bb[2], bb[3], flex_bn_addr(b1, n * 8, kk * 16, lane));
      flex_mma(s[n], a, bb);
      flex_mma(s[n + 1], a, bb + 2);
      flex_ldm_x4(bb[0], bb[1], bb[2], bb[3], flex_bn_addr(b2, n * 8, kk * 16, lane));
      flex_mma(dp[n], a2f, bb);
      flex_mma(dp[n + 1], a2f, bb + 2);
    }
  }
}

#if FLEX_BWD_WG
#include "flex_bwd_wg.cuh"
#else
static_assert(FLEX_BWD_WARPS * 16 == FLEX_BKV, "a warp per 16 kv rows");
extern "C" __global__ void __launch_bounds__(FLEX_BWD_NT)
    flex_bwd_dkdv(FLEX_DKDV_PARAMS FLEX_ARG_PARAMS) {
  const FlexArgs args = {{FLEX_ARG_VALUES}};
  constexpr int D = FLEX_D, BKV = FLEX_BKV, BM = FLEX_BMQ, NT = FLEX_BWD_NT;
  constexpr int NTILE = BM / 8, DT = D / 8, SUB = FLEX_BQ / BM;

  extern __shared__ __align__(128) unsigned char flex_smem[];
  flex_t *sK = (flex_t *)flex_smem;       // [BKV][D]
  flex_t *sV = sK + BKV * D;              // [BKV][D]
  flex_t *sQ = sV + BKV * D;              // [2][BM][D]
  flex_t *sdO = sQ + 2 * BM * D;          // [2][BM][D]
  float *sL = (float *)(sdO + 2 * BM * D); // [2][BM]
  float *sDl = sL + 2 * BM;               // [2][BM]
  flex_t *sdS = (flex_t *)(sDl + 2 * BM); // [BM][BKV]
  int *sIdx = (int *)(sdS + (FLEX_DQ_ATOMIC ? BM * BKV : 0)); // q block ids

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int heads_kv = heads_q / FLEX_GROUP;
#if FLEX_BWD_SPLIT
  // grid (query heads, kv blocks, batch); the CTA does its query head only.
  const int kb = blockIdx.y, b = blockIdx.z;
  const int g0 = blockIdx.x % FLEX_GROUP, hk = blockIdx.x / FLEX_GROUP;
  const int g1 = g0 + 1;
#else
  const int kb = blockIdx.y, hk = blockIdx.x, b = blockIdx.z;
  const int g0 = 0, g1 = FLEX_GROUP;
#endif
  const int kv0 = kb * BKV;
  const int wrow = warp * 16;
  const int c0 = kv0 + wrow + (lane >> 2), c1 = c0 + 8; // this thread's kv
  const float sl2 = scale * FLEX_LOG2E;

  const long long kvoff = ((long long)(b * heads_kv + hk) * lenkv) * D;
  flex_load_tile<BKV, NT>(sK, K + kvoff, kv0, lenkv, tid);
  flex_load_tile<BKV, NT>(sV, V + kvoff, kv0, lenkv, tid);

  float dk[DT][4], dv[DT][4];
#pragma unroll
  for (int i = 0; i < DT; i++)
#pragma unroll
    for (int e = 0; e < 4; e++)
      dk[i][e] = dv[i][e] = 0.f;

  for (int g = g0; g < g1; g++) {
    const int h = hk * FLEX_GROUP + g;
    const FlexBlocks blk = flex_blocks(sIdx, q_num, q_idx, fullq_num, fullq_idx, b, h, kb,
                                       bm_batch, bm_heads, nkvb, nqb, tid, NT);
    const int ntiles = (blk.npart + blk.nfull) * SUB;
    const long long qoff = (long long)(b * heads_q + h) * lenq;
    auto tile_start = [&](int t, bool &full) { return blk.start<FLEX_BQ, BM>(t, full); };
    auto load = [&](int t, int st) {
      bool f;
      int q0 = tile_start(t, f);
      flex_load_tile<BM, NT>(sQ + st * BM * D, Q + qoff * D, q0, lenq, tid);
      flex_load_tile<BM, NT>(sdO + st * BM * D, dO + qoff * D, q0, lenq, tid);
      flex_load_vec(sL + st * BM, LSE + qoff, q0, BM, lenq, tid);
      flex_load_vec(sDl + st * BM, Dlt + qoff, q0, BM, lenq, tid);
    };
    if (ntiles > 0)
      load(0, 0);
    flex_cp_commit();
    for (int t = 0; t < ntiles; t++) {
      const int st = t & 1;
      bool full;
      const int q0 = tile_start(t, full);
      if (t + 1 < ntiles)
        load(t + 1, st ^ 1);
      flex_cp_commit();
      flex_cp_wait<1>();
      __syncthreads();
      const flex_t *cQ = sQ + st * BM * D, *cdO = sdO + st * BM * D;
      const float *cL = sL + st * BM, *cDl = sDl + st * BM;

      // S^T = K Q^T and dP^T = V dO^T for this warp's 16 kv rows.
      float s[NTILE][4], dp[NTILE][4];
      flex_bwd_recompute<NTILE>(s, dp, sK, cQ, sV, cdO, wrow, lane);
      // P^T and dS^T, element (kv row c0/c1, q column).
#pragma unroll
      for (int n = 0; n < NTILE; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int qc = n * 8 + (lane & 3) * 2 + (e & 1);
          const int row = q0 + qc, col = e < 2 ? c0 : c1;
          const bool ok = full ? (row < lenq && col < lenkv)
                               : flex_allowed(args, b, h, row, col, lenq, lenkv);
#if FLEX_HAS_SCORE
          // P from the modified score; dS through the score's derivative.
          const float raw = s[n][e] * scale;
          const float p =
              ok ? exp2f((flex_score(args, raw, b, h, row, col) - cL[qc]) *
                         FLEX_LOG2E)
                 : 0.f;
          s[n][e] = p;
          dp[n][e] = ok ? flex_score_grad(args, raw, p * (dp[n][e] - cDl[qc]),
                                          b, h, row, col)
                        : 0.f;
#else
          const float p = ok ? exp2f(s[n][e] * sl2 - cL[qc] * FLEX_LOG2E) : 0.f;
          s[n][e] = p;
          dp[n][e] = p * (dp[n][e] - cDl[qc]);
#endif
        }
      }
      // dV += P^T dO, dK += dS^T Q (k = q dimension).
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) {
        unsigned a[4], ad[4];
        a[0] = flex_pack2(s[2 * kk][0], s[2 * kk][1]);
        a[1] = flex_pack2(s[2 * kk][2], s[2 * kk][3]);
        a[2] = flex_pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = flex_pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        ad[0] = flex_pack2(dp[2 * kk][0], dp[2 * kk][1]);
        ad[1] = flex_pack2(dp[2 * kk][2], dp[2 * kk][3]);
        ad[2] = flex_pack2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
        ad[3] = flex_pack2(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
        for (int n = 0; n < DT; n += 2) {
          unsigned bb[4];
          flex_ldm_x4_t(bb[0], bb[1], bb[2], bb[3],
                        flex_bk_addr(cdO, kk * 16, n * 8, lane));
          flex_mma(dv[n], a, bb);
          flex_mma(dv[n + 1], a, bb + 2);
          flex_ldm_x4_t(bb[0], bb[1], bb[2], bb[3],
                        flex_bk_addr(cQ, kk * 16, n * 8, lane));
          flex_mma(dk[n], ad, bb);
          flex_mma(dk[n + 1], ad, bb + 2);
        }
#if FLEX_DQ_ATOMIC
        // dS stored as [q][kv] for the dQ product below.
        const int kvl0 = wrow + (lane >> 2), kvl1 = kvl0 + 8;
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          const int n = 2 * kk + hh;
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int qc = n * 8 + (lane & 3) * 2 + (e & 1);
            const int kvl = e < 2 ? kvl0 : kvl1;
            unsigned pk = flex_pack2(dp[n][e], 0.f);
            sdS[flex_swz<BKV>(qc, kvl >> 3) + (kvl & 7)] = (flex_t)(pk & 0xffff);
          }
        }
#endif
      }
#if FLEX_DQ_ATOMIC
      __syncthreads();
      {
        // dQ[BM x D] += dS[BM x BKV] K[BKV x D]; warp w: rows (w%MT)*16,
        // columns split in NW/MT parts.
        constexpr int MT = BM / 16, NP = FLEX_BWD_WARPS / MT, DC = D / NP;
        const int mt = warp % MT, np = warp / MT;
        float dq[DC / 8][4];
#pragma unroll
        for (int i = 0; i < DC / 8; i++)
          dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < BKV / 16; kk++) {
          unsigned a[4];
          flex_ldm_x4(a[0], a[1], a[2], a[3],
                      flex_a_addr<BKV>(sdS, mt * 16, kk * 16, lane));
#pragma unroll
          for (int n = 0; n < DC / 8; n += 2) {
            unsigned bb[4];
            flex_ldm_x4_t(bb[0], bb[1], bb[2], bb[3],
                          flex_bk_addr(sK, kk * 16, np * DC + n * 8, lane));
            flex_mma(dq[n], a, bb);
            flex_mma(dq[n + 1], a, bb + 2);
          }
        }
        const int qr0 = q0 + mt * 16 + (lane >> 2), qr1 = qr0 + 8;
        float *g = dQacc + qoff * D;
#pragma unroll
        for (int n = 0; n < DC / 8; n++) {
          const int col = np * DC + n * 8 + (lane & 3) * 2;
          if (qr0 < lenq) {
            atomicAdd(g + (long long)qr0 * D + col, dq[n][0] * scale);
            atomicAdd(g + (long long)qr0 * D + col + 1, dq[n][1] * scale);
          }
          if (qr1 < lenq) {
            atomicAdd(g + (long long)qr1 * D + col, dq[n][2] * scale);
            atomicAdd(g + (long long)qr1 * D + col + 1, dq[n][3] * scale);
          }
        }
      }
#endif
      __syncthreads();
    }
    flex_cp_wait<0>();
    __syncthreads();
  }

  flex_dkv_t *gK = dK + kvoff, *gV = dV + kvoff;
#if FLEX_BWD_SPLIT == 2
  {
    const long long slice = (long long)gridDim.z * heads_kv * lenkv * D;
    gK += g0 * slice;
    gV += g0 * slice;
  }
#pragma unroll
  for (int n = 0; n < DT; n++) {
    const int col = n * 8 + (lane & 3) * 2;
    if (c0 < lenkv) {
      *(float2 *)(gK + (long long)c0 * D + col) =
          make_float2(dk[n][0] * scale, dk[n][1] * scale);
      *(float2 *)(gV + (long long)c0 * D + col) = make_float2(dv[n][0], dv[n][1]);
    }
    if (c1 < lenkv) {
      *(float2 *)(gK + (long long)c1 * D + col) =
          make_float2(dk[n][2] * scale, dk[n][3] * scale);
      *(float2 *)(gV + (long long)c1 * D + col) = make_float2(dv[n][2], dv[n][3]);
    }
  }
  return;
#elif FLEX_BWD_SPLIT
#pragma unroll
  for (int n = 0; n < DT; n++) {
    const int col = n * 8 + (lane & 3) * 2;
    if (c0 < lenkv) {
      atomicAdd(gK + (long long)c0 * D + col, dk[n][0] * scale);
      atomicAdd(gK + (long long)c0 * D + col + 1, dk[n][1] * scale);
      atomicAdd(gV + (long long)c0 * D + col, dv[n][0]);
      atomicAdd(gV + (long long)c0 * D + col + 1, dv[n][1]);
    }
    if (c1 < lenkv) {
      atomicAdd(gK + (long long)c1 * D + col, dk[n][2] * scale);
      atomicAdd(gK + (long long)c1 * D + col + 1, dk[n][3] * scale);
      atomicAdd(gV + (long long)c1 * D + col, dv[n][2]);
      atomicAdd(gV + (long long)c1 * D + col + 1, dv[n][3]);
    }
  }
  return;
#endif
#pragma unroll
  for (int n = 0; n < DT; n++) {
    const int col = n * 8 + (lane & 3) * 2;
    if (c0 < lenkv) {
      *(unsigned *)(gK + (long long)c0 * D + col) =
          flex_pack2(dk[n][0] * scale, dk[n][1] * scale);
      *(unsigned *)(gV + (long long)c0 * D + col) = flex_pack2(dv[n][0], dv[n][1]);
    }
    if (c1 < lenkv) {
      *(unsigned *)(gK + (long long)c1 * D + col) =
          flex_pack2(dk[n][2] * scale, dk[n][3] * scale);
      *(unsigned *)(gV + (long long)c1 * D + col) = flex_pack2(dv[n][2], dv[n][3]);
    }
  }
}
#endif // FLEX_BWD_WG

// flex_bwd_dq_convert writes dQ = dQacc in the storage type.
extern "C" __global__ void __launch_bounds__(256)
    flex_bwd_dq_convert(const float *__restrict__ dQacc, flex_t *__restrict__ dQ,
                        long long n) {
  long long i = ((long long)blockIdx.x * 256 + threadIdx.x) * 2;
  if (i < n)
    *(unsigned *)(dQ + i) = flex_pack2(dQacc[i], dQacc[i + 1]);
}

// flex_bwd_group_sum writes out = sum_{g < FLEX_GROUP} acc[g*n + i] in the
// storage type, adding the slices in order g = 0, 1, ... (deterministic).
extern "C" __global__ void __launch_bounds__(256)
    flex_bwd_group_sum(const float *__restrict__ acc, flex_t *__restrict__ out,
                       long long n) {
  long long i = ((long long)blockIdx.x * 256 + threadIdx.x) * 2;
  if (i >= n)
    return;
  float2 s = *(const float2 *)(acc + i);
#pragma unroll
  for (int g = 1; g < FLEX_GROUP; g++) {
    const float2 x = *(const float2 *)(acc + g * n + i);
    s.x += x.x;
    s.y += x.y;
  }
  *(unsigned *)(out + i) = flex_pack2(s.x, s.y);
}

#if !FLEX_DQ_ATOMIC
#include "flex_bwd_dq.cuh"
#endif
