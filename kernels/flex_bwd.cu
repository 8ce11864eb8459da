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

// flex_bwd_pre computes Dlt = rowsum(dO * O) in fp32 for every row (Dlt
// and dqacc: [batch, heads_q, lenq] rows; O and dO laid out as o_hi says),
// and zeroes the fp32 dQ accumulator when dqacc is not null.
extern "C" __global__ void __launch_bounds__(256)
    flex_bwd_pre(const flex_t *__restrict__ O, const flex_t *__restrict__ dO,
                 float *__restrict__ Dlt, float *__restrict__ dqacc,
                 long long rows, int heads_q, int lenq, int o_hi) {
  constexpr int CH = FLEX_D / 8;
  constexpr int RPB = FLEX_BWD_PRE_ROWS; // rows per CTA
  const int tid = threadIdx.x;
  const long long row = (long long)blockIdx.x * RPB + tid / CH;
  const int c = tid % CH;
  float acc = 0.f;
  if (row < rows) {
    const long long bh = row / lenq;
    const long long at = flex_o_head((int)(bh / heads_q), (int)(bh % heads_q), heads_q, lenq, o_hi) +
                         (row - bh * lenq) * flex_o_ld(heads_q, o_hi) + c * 8;
    const uint4 o = *(const uint4 *)(O + at);
    const uint4 g = *(const uint4 *)(dO + at);
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

#if FLEX_BWD_WG
// flex_red2 adds (x, y) to p[0], p[1] in one fp32 vector reduction (sm_90).
__device__ __forceinline__ void flex_red2(float *p, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(x), "f"(y) : "memory");
}
#endif

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

// flex_mma_pair adds a1 B1 to d1 and a2 B2 to d2 for one row tile and NT
// n8 tiles, k = 16: B1 and B2 are read from t1 and t2 at k0 as flex_ldm_b
// reads them, the two products interleaved fragment pair by fragment pair.
template <int NT, bool KN>
__device__ __forceinline__ void flex_mma_pair(float (&d1)[NT][4], const unsigned (&a1)[4],
                                              const flex_t *t1, float (&d2)[NT][4],
                                              const unsigned (&a2)[4], const flex_t *t2, int k0,
                                              int lane) {
#pragma unroll
  for (int n = 0; n < NT; n += 2) {
    unsigned bb[4];
    flex_ldm_b<KN>(bb, t1, k0, n * 8, lane);
    flex_mma2(d1 + n, a1, bb);
    flex_ldm_b<KN>(bb, t2, k0, n * 8, lane);
    flex_mma2(d2 + n, a2, bb);
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
  flex_zero(s);
  flex_zero(dp);
#pragma unroll
  for (int kk = 0; kk < FLEX_D / 16; kk++) {
    unsigned a[4], a2f[4];
    flex_ldm_x4(a, flex_a_addr(a1, wrow, kk * 16, lane));
    flex_ldm_x4(a2f, flex_a_addr(a2, wrow, kk * 16, lane));
    flex_mma_pair<NTILE, false>(s, a, b1, dp, a2f, b2, kk * 16, lane);
  }
}

// FlexKVBlock is the work of a flex_bwd_dkdv CTA: kv block kb of kv head hk
// in batch b, for the query heads hk * FLEX_GROUP + [g0, g1) of its group.
// The grid is (kv heads, kv blocks, batch), so that the heaviest kv blocks
// (lowest index under causal-like masks) of every head go first; with
// FLEX_BWD_SPLIT x runs over the query heads and the CTA does its own only;
// with FLEX_BWD_HALF x is twice as long, its low bit the half of D.
struct FlexKVBlock {
  int kb, hk, b, g0, g1;
};
__device__ __forceinline__ FlexKVBlock flex_kv_block() {
  const int hx = FLEX_BWD_HALF ? blockIdx.x >> 1 : blockIdx.x;
#if FLEX_BWD_SPLIT
  return FlexKVBlock{(int)blockIdx.y, hx / FLEX_GROUP, (int)blockIdx.z, hx % FLEX_GROUP, hx % FLEX_GROUP + 1};
#else
  return FlexKVBlock{(int)blockIdx.y, hx, (int)blockIdx.z, 0, FLEX_GROUP};
#endif
}

// FlexQStream streams to flex_bwd_dkdv the q tiles (BM rows, NT threads)
// of one query head at a time: Q and dO into sQ and sdO ([stages][BM][FLEX_D],
// laid out for wgmma when WG, else for mma.sync), LSE and Dlt into sL and
// sDl ([stages][BM]), with cp.async. dO is laid out as o_hi says.
template <int BM, int NT, bool WG> struct FlexQStream {
  flex_t *sQ, *sdO;
  float *sL, *sDl;
  const flex_t *Q, *dO;
  const float *LSE, *Dlt;
  int lenq, tid, o_hi;
  long long qoff; // the head's first row
  long long ooff; // the offset of the head's first row of dO
  int old;        // the distance between the head's rows of dO
  FlexBlocks blk; // the head's q-side list of the CTA's kv block
  int ntiles;     // tiles in blk
  // head selects query head hk * FLEX_GROUP + g of the CTA's group and
  // returns it; every thread calls it (flex_blocks copies the list to sIdx).
  __device__ __forceinline__ int head(const FlexKVBlock &cta, int g, int *sIdx, const int *num,
                                      const int *idx, const int *fnum, const int *fidx, int bm_batch,
                                      int bm_heads, int nkvb, int nqb, int heads_q) {
    const int h = cta.hk * FLEX_GROUP + g;
    qoff = (long long)(cta.b * heads_q + h) * lenq;
    ooff = flex_o_head(cta.b, h, heads_q, lenq, o_hi);
    old = flex_o_ld(heads_q, o_hi);
    blk = flex_blocks(sIdx, num, idx, fnum, fidx, cta.b, h, cta.kb, bm_batch, bm_heads, nkvb, nqb, tid, NT);
    ntiles = blk.tiles<FLEX_BQ, BM>();
    return h;
  }
  // start returns the first q row of tile t and whether its block is full.
  __device__ __forceinline__ int start(int t, bool &full) const { return blk.start<FLEX_BQ, BM>(t, full); }
  // load starts the copies of tile t into stage st and commits them with
  // the copies issued before (an empty group when t is past the list).
  __device__ __forceinline__ void load(int t, int st) const {
    if (t < ntiles) {
      bool f;
      const int q0 = start(t, f);
      if constexpr (WG) {
        flex_wg_load<BM, NT>(sQ + st * BM * FLEX_D, Q + qoff * FLEX_D, q0, lenq, tid);
        flex_wg_load<BM, NT>(sdO + st * BM * FLEX_D, dO + ooff, q0, lenq, tid, old);
      } else {
        flex_load_tile<BM, NT>(sQ + st * BM * FLEX_D, Q + qoff * FLEX_D, q0, lenq, tid);
        flex_load_tile<BM, NT>(sdO + st * BM * FLEX_D, dO + ooff, q0, lenq, tid, old);
      }
      flex_load_vec(sL + st * BM, LSE + qoff, q0, BM, lenq, tid);
      flex_load_vec(sDl + st * BM, Dlt + qoff, q0, BM, lenq, tid);
    }
    flex_cp_commit();
  }
};

#if FLEX_HAS_SCORE
// flex_bwd_score_p returns P = exp(score(s * scale) - lse) of the pair
// (row, col) of a flex_bwd_dkdv tile (0 unless ok) and turns dp, its dP,
// into dS = P (dP - dlt) score'(s * scale) in place (0 unless ok).
__device__ __forceinline__ float flex_bwd_score_p(const FlexArgs &A, bool ok, float s, float &dp,
                                                  float scale, float lse, float dlt, int b, int h,
                                                  int row, int col) {
  const float raw = s * scale;
  const float p = ok ? exp2f((flex_score(A, raw, b, h, row, col) - lse) * FLEX_LOG2E) : 0.f;
  dp = ok ? flex_score_grad(A, raw, p * (dp - dlt), b, h, row, col) : 0.f;
  return p;
}
#endif

// flex_bwd_put writes (x, y) to p[0], p[1] of dK or dV: in the storage type
// (FLEX_BWD_SPLIT 0), added atomically into the fp32 workspace (1), or
// stored into the query head's fp32 slice (2).
__device__ __forceinline__ void flex_bwd_put(flex_dkv_t *p, float x, float y) {
#if FLEX_BWD_SPLIT == 2
  *(float2 *)p = make_float2(x, y);
#elif FLEX_BWD_SPLIT && FLEX_BWD_WG
  flex_red2(p, x, y);
#elif FLEX_BWD_SPLIT
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
#else
  *(unsigned *)p = flex_pack2(x, y);
#endif
}

#if FLEX_BWD_WG
#include "flex_bwd_wg.cuh"
#else
static_assert(FLEX_BWD_WARPS * 16 == FLEX_BKV, "a warp per 16 kv rows");
extern "C" __global__ void __launch_bounds__(FLEX_BWD_NT)
    flex_bwd_dkdv(FLEX_DKDV_PARAMS FLEX_ARG_PARAMS) {
  const FlexArgs args = {{FLEX_ARG_VALUES}};
  constexpr int D = FLEX_D, BKV = FLEX_BKV, BM = FLEX_BMQ, NT = FLEX_BWD_NT;
  constexpr int NTILE = BM / 8, DT = D / 8;

  extern __shared__ __align__(128) unsigned char flex_smem[];
  flex_t *sK, *sV, *sQ, *sdO, *sdS; // [BKV][D] each, [2][BM][D] each, [BM][BKV]
  float *sL, *sDl;                  // [2][BM] each
  int *sIdx;                        // q block ids
  flex_carve(flex_smem, sK, BKV * D, sV, BKV * D, sQ, 2 * BM * D, sdO, 2 * BM * D, sL, 2 * BM,
             sDl, 2 * BM, sdS, FLEX_DQ_ATOMIC ? BM * BKV : 0, sIdx);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  FlexQStream<BM, NT, false> qs{sQ, sdO, sL, sDl, Q, dO, LSE, Dlt, lenq, tid, o_hi};
  const int heads_kv = heads_q / FLEX_GROUP;
  const FlexKVBlock cta = flex_kv_block();
  const int kb = cta.kb, hk = cta.hk, b = cta.b;
  const int kv0 = kb * BKV;
  const int wrow = warp * 16;
  const int c0 = kv0 + wrow + (lane >> 2), c1 = c0 + 8; // this thread's kv
  const float sl2 = scale * FLEX_LOG2E;

  const long long kvoff = ((long long)(b * heads_kv + hk) * lenkv) * D;
  flex_load_tile<BKV, NT>(sK, K + kvoff, kv0, lenkv, tid);
  flex_load_tile<BKV, NT>(sV, V + kvoff, kv0, lenkv, tid);

  float dk[DT][4], dv[DT][4];
  flex_zero(dk);
  flex_zero(dv);

  for (int g = cta.g0; g < cta.g1; g++) {
    const int h = qs.head(cta, g, sIdx, q_num, q_idx, fullq_num, fullq_idx, bm_batch, bm_heads, nkvb, nqb, heads_q);
    qs.load(0, 0);
    for (int t = 0; t < qs.ntiles; t++) {
      const int st = t & 1;
      bool full;
      const int q0 = qs.start(t, full);
      qs.load(t + 1, st ^ 1);
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
          const int qc = flex_acc_col(n, e, lane), row = q0 + qc, col = e < 2 ? c0 : c1;
          const bool ok = flex_ok(args, full, b, h, row, col, lenq, lenkv);
#if FLEX_HAS_SCORE
          s[n][e] = flex_bwd_score_p(args, ok, s[n][e], dp[n][e], scale, cL[qc], cDl[qc], b, h, row, col);
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
        flex_frag_a(a, s[2 * kk], s[2 * kk + 1]);
        flex_frag_a(ad, dp[2 * kk], dp[2 * kk + 1]);
        flex_mma_pair<DT, true>(dv, a, cdO, dk, ad, cQ, kk * 16, lane);
#if FLEX_DQ_ATOMIC
        // dS stored as [q][kv] for the dQ product below.
        const int kvl0 = wrow + (lane >> 2), kvl1 = kvl0 + 8;
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
          const int n = 2 * kk + hh;
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int qc = flex_acc_col(n, e, lane);
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
        flex_zero(dq);
#pragma unroll
        for (int kk = 0; kk < BKV / 16; kk++) {
          unsigned a[4];
          flex_ldm_x4(a, flex_a_addr<BKV>(sdS, mt * 16, kk * 16, lane));
          flex_mma_rows<1, DC / 8, true>(&dq, &a, sK, kk * 16, np * DC, lane);
        }
        const int qr0 = q0 + mt * 16 + (lane >> 2), qr1 = qr0 + 8;
        float *g = dQacc + qs.qoff * D;
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
    gK += cta.g0 * slice;
    gV += cta.g0 * slice;
  }
#endif
#pragma unroll
  for (int n = 0; n < DT; n++) {
    const int col = n * 8 + (lane & 3) * 2;
    if (c0 < lenkv) {
      flex_bwd_put(gK + (long long)c0 * D + col, dk[n][0] * scale, dk[n][1] * scale);
      flex_bwd_put(gV + (long long)c0 * D + col, dv[n][0], dv[n][1]);
    }
    if (c1 < lenkv) {
      flex_bwd_put(gK + (long long)c1 * D + col, dk[n][2] * scale, dk[n][3] * scale);
      flex_bwd_put(gV + (long long)c1 * D + col, dv[n][2], dv[n][3]);
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
