// flex_bwd_dq.cuh: the q-parallel dQ pass of the deterministic backward
// (included by flex_bwd.cu when FLEX_DQ_ATOMIC is 0).
//
//   dS_ij = P_ij (dO_i . V_j - Dlt_i),  P_ij = exp(score(S_ij) - lse_i)
//   dQ_i  = scale sum_j dS_ij score'(S_ij) K_j
//
// One CTA per (q block, query head, batch), FLEX_BQ/16 warps of 16 q rows.
// It walks the kv-side lists of its q block (the forward's lists: partial
// blocks with the mask, full blocks without), recomputes S and dP per kv
// stage of FLEX_DQ_BN rows and accumulates dQ in registers; every dQ element
// is written once by one thread in a fixed order: no atomics, so two runs
// give the same bits. K and V are double-buffered with cp.async.
//
// Tiles (flex/flexcuda Spec.defines): FLEX_DQ_NT threads, FLEX_DQ_BN kv rows
// per stage.
#pragma once

#if !defined(FLEX_DQ_NT) || !defined(FLEX_DQ_BN)
#error "flex_bwd_dq.cuh: FLEX_DQ_NT and FLEX_DQ_BN come from the generator (flex/flexcuda)"
#endif
static_assert(FLEX_BKV % FLEX_DQ_BN == 0, "kv block must be a multiple of FLEX_DQ_BN");
static_assert(FLEX_DQ_NT / 32 * 16 == FLEX_BQ, "a warp per 16 q rows");

extern "C" __global__ void __launch_bounds__(FLEX_DQ_NT)
    flex_bwd_dq(const flex_t *__restrict__ Q, const flex_t *__restrict__ K,
                const flex_t *__restrict__ V, const flex_t *__restrict__ dO,
                const float *__restrict__ LSE, const float *__restrict__ Dlt,
                flex_t *__restrict__ dQ, const int *__restrict__ kv_num,
                const int *__restrict__ kv_idx, const int *__restrict__ full_num,
                const int *__restrict__ full_idx, int heads_q, int lenq,
                int lenkv, int bm_batch, int bm_heads, int nqb, int nkvb,
                float scale, int o_hi FLEX_ARG_PARAMS) {
  const FlexArgs args = {{FLEX_ARG_VALUES}};
  constexpr int D = FLEX_D, BQ = FLEX_BQ, BN = FLEX_DQ_BN, NT = FLEX_DQ_NT;
  constexpr int NTILE = BN / 8, DT = D / 8;

  extern __shared__ __align__(128) unsigned char flex_smem[];
  flex_t *sQ, *sdO, *sK, *sV; // [BQ][D] each, [2][BN][D] each
  float *sL, *sDl;            // [BQ] each
  int *sIdx;                  // [npart + nfull] kv block ids
  flex_carve(flex_smem, sQ, BQ * D, sdO, BQ * D, sK, 2 * BN * D, sV, 2 * BN * D, sL, BQ, sDl, BQ, sIdx);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const FlexQBlock cta = flex_q_block(heads_q);
  const int qb = cta.qb, h = cta.h, b = cta.b, q0 = cta.q0;
  const long long qoff = (long long)(b * heads_q + h) * lenq;
  const long long kvoff = ((long long)(b * cta.heads_kv + cta.hk) * lenkv) * D;

  // The block list moves to shared memory once, off the loop's critical path.
  const FlexBlocks blk = flex_blocks(sIdx, kv_num, kv_idx, full_num, full_idx, b, h, qb,
                                     bm_batch, bm_heads, nqb, nkvb, tid, NT);
  const int ntiles = blk.tiles<FLEX_BKV, BN>();
  const FlexKVStream<BN, NT> kv{sK, sV, K + kvoff, V + kvoff, blk, ntiles, lenkv, tid};

  flex_load_tile<BQ, NT>(sQ, Q + qoff * D, q0, lenq, tid);
  flex_load_tile<BQ, NT>(sdO, dO + flex_o_head(b, h, heads_q, lenq, o_hi), q0, lenq, tid, flex_o_ld(heads_q, o_hi));
  flex_load_vec(sL, LSE + qoff, q0, BQ, lenq, tid);
  flex_load_vec(sDl, Dlt + qoff, q0, BQ, lenq, tid);
  kv.prefetch(0, 0);

  float dq[DT][4];
  flex_zero(dq);
  const int wrow = warp * 16;
  const int lr0 = wrow + (lane >> 2), lr1 = lr0 + 8; // local rows
  const int r0 = q0 + lr0, r1 = q0 + lr1;
  const float sl2 = scale * FLEX_LOG2E;

  for (int t = 0; t < ntiles; t++) {
    const int st = t & 1;
    bool full;
    const int kv0 = kv.begin(t, full);
    const flex_t *cK = sK + st * BN * D, *cV = sV + st * BN * D;
    const float L0 = sL[lr0] * FLEX_LOG2E, L1 = sL[lr1] * FLEX_LOG2E;
    const float Dl0 = sDl[lr0], Dl1 = sDl[lr1];

    // S = Q K^T and dP = dO V^T for this warp's 16 rows x BN kv columns.
    float s[NTILE][4], dp[NTILE][4];
    flex_bwd_recompute<NTILE>(s, dp, sQ, cK, sdO, cV, wrow, lane);
    // dS, element (q row r0/r1, kv column), packed as the A operand of dQ.
    unsigned pk[BN / 16][4];
#pragma unroll
    for (int n = 0; n < NTILE; n++) {
      float ds[4];
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int row = e < 2 ? r0 : r1;
        const int col = kv0 + flex_acc_col(n, e, lane);
        const bool ok = flex_ok(args, full, b, h, row, col, lenq, lenkv);
        const float Lr = e < 2 ? L0 : L1, Dr = e < 2 ? Dl0 : Dl1;
#if FLEX_HAS_SCORE
        const float raw = s[n][e] * scale;
        const float p =
            ok ? exp2f(flex_score(args, raw, b, h, row, col) * FLEX_LOG2E - Lr)
               : 0.f;
        ds[e] = ok ? flex_score_grad(args, raw, p * (dp[n][e] - Dr), b, h, row,
                                     col)
                   : 0.f;
#else
        const float p = ok ? exp2f(s[n][e] * sl2 - Lr) : 0.f;
        ds[e] = p * (dp[n][e] - Dr);
#endif
      }
      pk[n >> 1][(n & 1) * 2] = flex_pack2(ds[0], ds[1]);
      pk[n >> 1][(n & 1) * 2 + 1] = flex_pack2(ds[2], ds[3]);
    }
    // dQ += dS K (k = kv rows), K via ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
      flex_mma_rows<1, DT, true>(&dq, &pk[kk], cK, kk * 16, 0, lane);
    __syncthreads(); // stage st is refilled by the next iteration's prefetch
  }
  flex_cp_wait<0>();

  flex_t *g = dQ + qoff * D;
#pragma unroll
  for (int n = 0; n < DT; n++) {
    const int col = n * 8 + (lane & 3) * 2;
    if (r0 < lenq)
      *(unsigned *)(g + (long long)r0 * D + col) =
          flex_pack2(dq[n][0] * scale, dq[n][1] * scale);
    if (r1 < lenq)
      *(unsigned *)(g + (long long)r1 * D + col) =
          flex_pack2(dq[n][2] * scale, dq[n][3] * scale);
  }
}
