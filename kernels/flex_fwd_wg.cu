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
// and V read transposed from shared memory. K and V tiles are
// double-buffered with cp.async. Only the non-empty kv blocks are visited,
// the partial ones first (mask per element), then the full ones (no mask).
// GQA: query head h reads kv head h / FLEX_GROUP (no copies).
//
// Builds alone: nvcc -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -cubin kernels/flex_fwd_wg.cu
#include "flex_common.cuh"
#include "flex_wgmma.cuh"

#ifndef FLEX_WG_BN
#define FLEX_WG_BN 128 // kv rows per pipeline stage (N of the S product)
#endif
#define FLEX_WG_NWG (FLEX_BQ / 64)
#define FLEX_WG_NT (FLEX_WG_NWG * 128)

static_assert(FLEX_D == 64 || FLEX_D == 128, "v6 forward: head dim 64 or 128");
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
#else
    flex_wgmma_ss64<0, 0>(s, flex_wg_desc(a, 16, 1024), flex_wg_desc(b, 16, 1024), kk > 0);
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
#if FLEX_D == 128
    flex_wgmma_rs128<1>(o, p[kk], db, 1);
#else
    flex_wgmma_rs64<1>(o, p[kk], db, 1);
#endif
  }
}

extern "C" __global__ void __launch_bounds__(FLEX_WG_NT, 1)
    flex_fwd(const flex_t *__restrict__ Q, const flex_t *__restrict__ K,
             const flex_t *__restrict__ V, flex_t *__restrict__ O,
             float *__restrict__ LSE, const int *__restrict__ kv_num,
             const int *__restrict__ kv_idx, const int *__restrict__ full_num,
             const int *__restrict__ full_idx, int heads_q, int lenq,
             int lenkv, int bm_batch, int bm_heads, int nqb, int nkvb,
             float scale FLEX_ARG_PARAMS) {
  const FlexArgs args = {{FLEX_ARG_VALUES}};
  constexpr int D = FLEX_D, BQ = FLEX_BQ, BN = FLEX_WG_BN, NT = FLEX_WG_NT;
  constexpr int NTILE = BN / 8; // n8 column groups of S
  constexpr int DT = D / 8;     // n8 column groups of O
  constexpr int SUB = FLEX_BKV / BN;

  extern __shared__ __align__(1024) unsigned char flex_smem_raw[];
  // wgmma's swizzle needs 1024-byte aligned tiles (FLEX_FWD_WG_SMEM has the slack).
  unsigned char *flex_smem = flex_smem_raw + ((1024 - (flex_smem_addr(flex_smem_raw) & 1023)) & 1023);
  flex_t *sQ = (flex_t *)flex_smem;
  flex_t *sK = sQ + BQ * D;     // [2][BN*D]
  flex_t *sV = sK + 2 * BN * D; // [2][BN*D]
  int *sIdx = (int *)(sV + 2 * BN * D);

  const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7;
  const int wq = (tid >> 5) & 3; // warp within the warpgroup
  const int qb = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x % heads_q, b = blockIdx.x / heads_q;
  const int hk = h / FLEX_GROUP;
  const int heads_kv = heads_q / FLEX_GROUP;
  const int q0 = qb * BQ;

  const flex_t *gQ = Q + ((long long)(b * heads_q + h) * lenq) * D;
  const flex_t *gK = K + ((long long)(b * heads_kv + hk) * lenkv) * D;
  const flex_t *gV = V + ((long long)(b * heads_kv + hk) * lenkv) * D;

  const int bmrow = ((bm_batch == 1 ? 0 : b) * bm_heads +
                     (bm_heads == 1 ? 0 : h)) * nqb + qb;
  const int npart = kv_num[bmrow];
  const int nfull = full_num[bmrow];
  const int ntiles = (npart + nfull) * SUB;
  {
    const int *pidx = kv_idx + (long long)bmrow * nkvb;
    const int *fidx = full_idx + (long long)bmrow * nkvb;
    for (int i = tid; i < npart + nfull; i += NT)
      sIdx[i] = i < npart ? pidx[i] : fidx[i - npart];
  }
  __syncthreads();

  auto tile_start = [&](int t, bool &full) {
    const int j = t / SUB, s = t % SUB;
    full = j >= npart;
    return sIdx[j] * FLEX_BKV + s * BN;
  };

  flex_wg_load<BQ, NT>(sQ, gQ, q0, lenq, tid);
  if (ntiles > 0) {
    bool f;
    const int kv0 = tile_start(0, f);
    flex_wg_load<BN, NT>(sK, gK, kv0, lenkv, tid);
    flex_wg_load<BN, NT>(sV, gV, kv0, lenkv, tid);
  }
  flex_cp_commit();

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; i++)
    o[i] = 0.f;
  float m0 = FLEX_NEG_INF, m1 = FLEX_NEG_INF, l0 = 0.f, l1 = 0.f;
  const int r0 = q0 + wg * 64 + wq * 16 + (lane >> 2), r1 = r0 + 8;
  const float sl2 = scale * FLEX_LOG2E;

  for (int t = 0; t < ntiles; t++) {
    const int st = t & 1;
    bool full;
    const int kv0 = tile_start(t, full);
    if (t + 1 < ntiles) {
      bool f2;
      const int kvn = tile_start(t + 1, f2);
      flex_wg_load<BN, NT>(sK + (st ^ 1) * BN * D, gK, kvn, lenkv, tid);
      flex_wg_load<BN, NT>(sV + (st ^ 1) * BN * D, gV, kvn, lenkv, tid);
    }
    flex_cp_commit();
    flex_cp_wait<1>();
    flex_fence_async(); // cp.async data is read by the tensor cores next
    __syncthreads();

    float s[BN / 2];
    flex_wg_fence();
    flex_wg_qk(s, sQ, sK + st * BN * D, wg);
    flex_wg_commit();
    flex_wg_wait<0>();

    // Scores in the log2 domain, masked; s[n*4+e] is row r0 (e < 2) or r1,
    // column kv0 + 8n + 2(lane%4) + e%2.
    float mx0 = FLEX_NEG_INF, mx1 = FLEX_NEG_INF;
#pragma unroll
    for (int n = 0; n < NTILE; n++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int row = e < 2 ? r0 : r1;
        const int col = kv0 + n * 8 + (lane & 3) * 2 + (e & 1);
        const bool ok = full ? (col < lenkv && row < lenq)
                             : flex_allowed(args, b, h, row, col, lenq, lenkv);
        float x = FLEX_NEG_INF;
        if (ok) {
#if FLEX_HAS_SCORE
          x = flex_score(args, s[n * 4 + e] * scale, b, h, row, col) * FLEX_LOG2E;
#else
          x = s[n * 4 + e] * sl2;
#endif
        }
        s[n * 4 + e] = x;
      }
      mx0 = fmaxf(mx0, fmaxf(s[n * 4], s[n * 4 + 1]));
      mx1 = fmaxf(mx1, fmaxf(s[n * 4 + 2], s[n * 4 + 3]));
    }
    mx0 = flex_quad_max(mx0);
    mx1 = flex_quad_max(mx1);
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float ms0 = mn0 == FLEX_NEG_INF ? 0.f : mn0;
    const float ms1 = mn1 == FLEX_NEG_INF ? 0.f : mn1;
    const float c0 = exp2f(m0 - ms0), c1 = exp2f(m1 - ms1);
    m0 = mn0;
    m1 = mn1;
    float ps0 = 0.f, ps1 = 0.f;
    unsigned p[BN / 16][4];
#pragma unroll
    for (int n = 0; n < NTILE; n++) {
      const float e0 = exp2f(s[n * 4] - ms0), e1 = exp2f(s[n * 4 + 1] - ms0);
      const float e2 = exp2f(s[n * 4 + 2] - ms1), e3 = exp2f(s[n * 4 + 3] - ms1);
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
    flex_wg_pv(o, p, sV + st * BN * D);
    flex_wg_commit();
    flex_wg_wait<0>();
    __syncthreads(); // stage st is refilled by the next iteration's prefetch
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

// Dynamic shared memory of flex_fwd (v6) in bytes, plus 8 * nkvb for the
// block lists added at launch; 1024 bytes of slack for the alignment.
#define FLEX_FWD_WG_SMEM ((FLEX_BQ + 4 * FLEX_WG_BN) * FLEX_D * 2 + 1024)
