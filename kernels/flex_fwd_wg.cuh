// flex_fwd_wg.cuh: the pieces of the Hopper forward (flex_fwd_ws.cu) that
// work on one warpgroup's 64 query rows: the S = Q K^T and O += P V products
// on warpgroup MMA, the online softmax of one tile of scores, and the O / LSE
// store.
//
// Accumulator layout (flex_wgmma.cuh): s[n*4 + e] is row r0 (e < 2) or
// r1 = r0 + 8, column 8n + 2(lane%4) + e%2 of the tile.
#pragma once

// FLEX_WG_BN: kv rows per tile (N of the S product), from the generator.
#ifndef FLEX_WG_BN
#error "flex_fwd_wg.cuh: FLEX_WG_BN comes from the generator (flex/flexcuda)"
#endif
static_assert(FLEX_D == 64 || FLEX_D == 128 || FLEX_D == 256, "wgmma forward: head dim 64, 128 or 256");
static_assert(FLEX_BQ % 64 == 0, "wgmma forward: q block is whole warpgroups of 64 rows");
static_assert(FLEX_BKV % FLEX_WG_BN == 0, "kv block must be a multiple of BN");

// The S product: A = Q rows [64 wg, +64) (K-major), B = K tile (K-major);
// k step kk covers head-dim columns [16kk, +16).
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

// FlexRows is the online-softmax state of a thread's two rows r0, r1:
// running max m (log2 domain) and quad-partial sum l.
struct FlexRows {
  int r0, r1;
  float m0, m1, l0, l1;
};

// flex_wg_softmax turns one tile of raw scores (first column kv0; full: the
// block needs no mask) into exp2(score - new max) in place, updates the
// running max and sums of rs, and returns in c0, c1 the factors that rescale
// what was accumulated under the old max. Identity score: raw dot products,
// scaled inside the exponent; score programs: their log2-domain value.
__device__ __forceinline__ void flex_wg_softmax(float (&sc)[FLEX_WG_BN / 2], const FlexArgs &args,
                                                int b, int h, int kv0, bool full, int lane,
                                                int lenq, int lenkv, float scale, FlexRows &rs,
                                                float &c0, float &c1) {
  constexpr int NTILE = FLEX_WG_BN / 8;
  // (A branch skipping the mask for full tiles inside both lengths makes
  // the kernels with mask programs spill: measured with ptxas 12.4.)
#pragma unroll
  for (int n = 0; n < NTILE; n++) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int row = e < 2 ? rs.r0 : rs.r1;
      const int col = kv0 + flex_acc_col(n, e, lane);
      const bool ok = flex_ok(args, full, b, h, row, col, lenq, lenkv);
#if FLEX_HAS_SCORE
      sc[n * 4 + e] = ok ? flex_score(args, sc[n * 4 + e] * scale, b, h, row, col) * FLEX_LOG2E : FLEX_NEG_INF;
#else
      sc[n * 4 + e] = ok ? sc[n * 4 + e] : FLEX_NEG_INF;
#endif
    }
  }
  float mx0 = FLEX_NEG_INF, mx1 = FLEX_NEG_INF;
#pragma unroll
  for (int n = 0; n < NTILE; n++) {
    mx0 = fmaxf(mx0, fmaxf(sc[n * 4], sc[n * 4 + 1]));
    mx1 = fmaxf(mx1, fmaxf(sc[n * 4 + 2], sc[n * 4 + 3]));
  }
#if FLEX_HAS_SCORE
  constexpr float xs = 1.f;
#else
  const float xs = scale * FLEX_LOG2E;
#endif
  mx0 = flex_quad_max(mx0) * xs;
  mx1 = flex_quad_max(mx1) * xs;
  const float mn0 = fmaxf(rs.m0, mx0), mn1 = fmaxf(rs.m1, mx1);
  const float ms0 = mn0 == FLEX_NEG_INF ? 0.f : mn0;
  const float ms1 = mn1 == FLEX_NEG_INF ? 0.f : mn1;
  c0 = flex_ex2(rs.m0 - ms0);
  c1 = flex_ex2(rs.m1 - ms1);
  rs.m0 = mn0;
  rs.m1 = mn1;
  float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
  for (int n = 0; n < NTILE; n++) {
    sc[n * 4] = flex_ex2(fmaf(sc[n * 4], xs, -ms0));
    sc[n * 4 + 1] = flex_ex2(fmaf(sc[n * 4 + 1], xs, -ms0));
    sc[n * 4 + 2] = flex_ex2(fmaf(sc[n * 4 + 2], xs, -ms1));
    sc[n * 4 + 3] = flex_ex2(fmaf(sc[n * 4 + 3], xs, -ms1));
    ps0 += sc[n * 4] + sc[n * 4 + 1];
    ps1 += sc[n * 4 + 2] + sc[n * 4 + 3];
  }
  rs.l0 = rs.l0 * c0 + ps0; // quad-partial sums; reduced at the end
  rs.l1 = rs.l1 * c1 + ps1;
}

// flex_wg_pack packs a tile of probabilities into the A fragments of the PV
// product: k step n/2 takes registers {0,1} from n even, {2,3} from n odd.
__device__ __forceinline__ void flex_wg_pack(unsigned (&p)[FLEX_WG_BN / 16][4],
                                             const float (&sc)[FLEX_WG_BN / 2]) {
#pragma unroll
  for (int n = 0; n < FLEX_WG_BN / 8; n++) {
    p[n >> 1][(n & 1) * 2] = flex_pack2(sc[n * 4], sc[n * 4 + 1]);
    p[n >> 1][(n & 1) * 2 + 1] = flex_pack2(sc[n * 4 + 2], sc[n * 4 + 3]);
  }
}

// flex_wg_rescale multiplies rows r0 and r1 of O by c0 and c1.
__device__ __forceinline__ void flex_wg_rescale(float (&o)[FLEX_D / 2], float c0, float c1) {
#pragma unroll
  for (int i = 0; i < FLEX_D / 8; i++) {
    o[i * 4] *= c0;
    o[i * 4 + 1] *= c0;
    o[i * 4 + 2] *= c1;
    o[i * 4 + 3] *= c1;
  }
}

// flex_wg_store writes rows r0 and r1 of O (normalised; the head's rows
// start at gO, ld elements apart) and their LSE, or 0 and -inf for rows with
// nothing allowed.
__device__ __forceinline__ void flex_wg_store(flex_t *gO, int ld, float *gL, const float (&o)[FLEX_D / 2],
                                              const FlexRows &rs, int lane, int lenq) {
  constexpr int D = FLEX_D;
  const float lt0 = flex_quad_sum(rs.l0), lt1 = flex_quad_sum(rs.l1);
  const float inv0 = lt0 > 0.f ? 1.f / lt0 : 0.f;
  const float inv1 = lt1 > 0.f ? 1.f / lt1 : 0.f;
  const int r0 = rs.r0, r1 = rs.r1;
#pragma unroll
  for (int n = 0; n < D / 8; n++) {
    const int col = n * 8 + (lane & 3) * 2;
    if (r0 < lenq)
      *(unsigned *)(gO + (long long)r0 * ld + col) = flex_pack2(o[n * 4] * inv0, o[n * 4 + 1] * inv0);
    if (r1 < lenq)
      *(unsigned *)(gO + (long long)r1 * ld + col) = flex_pack2(o[n * 4 + 2] * inv1, o[n * 4 + 3] * inv1);
  }
  if ((lane & 3) == 0) {
    if (r0 < lenq)
      gL[r0] = lt0 > 0.f ? (rs.m0 + __log2f(lt0)) * FLEX_LN2 : FLEX_NEG_INF;
    if (r1 < lenq)
      gL[r1] = lt1 > 0.f ? (rs.m1 + __log2f(lt1)) * FLEX_LN2 : FLEX_NEG_INF;
  }
}
