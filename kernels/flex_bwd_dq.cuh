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
                float scale FLEX_ARG_PARAMS) {
  const FlexArgs args = {{FLEX_ARG_VALUES}};
  constexpr int D = FLEX_D, BQ = FLEX_BQ, BN = FLEX_DQ_BN, NT = FLEX_DQ_NT;
  constexpr int NTILE = BN / 8, DT = D / 8, SUB = FLEX_BKV / BN;

  extern __shared__ __align__(128) unsigned char flex_smem[];
  flex_t *sQ = (flex_t *)flex_smem;      // [BQ][D]
  flex_t *sdO = sQ + BQ * D;             // [BQ][D]
  flex_t *sK = sdO + BQ * D;             // [2][BN][D]
  flex_t *sV = sK + 2 * BN * D;          // [2][BN][D]
  float *sL = (float *)(sV + 2 * BN * D); // [BQ]
  float *sDl = sL + BQ;                  // [BQ]
  int *sIdx = (int *)(sDl + BQ);         // [npart + nfull] kv block ids

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // grid (heads x batch, q blocks), heaviest (last) q blocks first.
  const int qb = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x % heads_q, b = blockIdx.x / heads_q;
  const int hk = h / FLEX_GROUP, heads_kv = heads_q / FLEX_GROUP;
  const int q0 = qb * BQ;
  const long long qoff = (long long)(b * heads_q + h) * lenq;
  const flex_t *gK = K + ((long long)(b * heads_kv + hk) * lenkv) * D;
  const flex_t *gV = V + ((long long)(b * heads_kv + hk) * lenkv) * D;

  // The block list moves to shared memory once, off the loop's critical path.
  const FlexBlocks blk = flex_blocks(sIdx, kv_num, kv_idx, full_num, full_idx, b, h, qb,
                                     bm_batch, bm_heads, nqb, nkvb, tid, NT);
  const int ntiles = (blk.npart + blk.nfull) * SUB;
  auto tile_start = [&](int t, bool &full) { return blk.start<FLEX_BKV, BN>(t, full); };

  flex_load_tile<BQ, NT>(sQ, Q + qoff * D, q0, lenq, tid);
  flex_load_tile<BQ, NT>(sdO, dO + qoff * D, q0, lenq, tid);
  flex_load_vec(sL, LSE + qoff, q0, BQ, lenq, tid);
  flex_load_vec(sDl, Dlt + qoff, q0, BQ, lenq, tid);
  if (ntiles > 0) {
    bool f;
    const int kv0 = tile_start(0, f);
    flex_load_tile<BN, NT>(sK, gK, kv0, lenkv, tid);
    flex_load_tile<BN, NT>(sV, gV, kv0, lenkv, tid);
  }
  flex_cp_commit();

  float dq[DT][4];
#pragma unroll
  for (int i = 0; i < DT; i++)
    dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
  const int wrow = warp * 16;
  const int lr0 = wrow + (lane >> 2), lr1 = lr0 + 8; // local rows
  const int r0 = q0 + lr0, r1 = q0 + lr1;
  const float sl2 = scale * FLEX_LOG2E;

  for (int t = 0; t < ntiles; t++) {
    const int st = t & 1;
    bool full;
    const int kv0 = tile_start(t, full);
    if (t + 1 < ntiles) {
      bool f2;
      const int kvn = tile_start(t + 1, f2);
      flex_load_tile<BN, NT>(sK + (st ^ 1) * BN * D, gK, kvn, lenkv, tid);
      flex_load_tile<BN, NT>(sV + (st ^ 1) * BN * D, gV, kvn, lenkv, tid);
    }
    flex_cp_commit();
    flex_cp_wait<1>();
    __syncthreads();
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
        const int col = kv0 + n * 8 + (lane & 3) * 2 + (e & 1);
        const bool ok = full ? (row < lenq && col < lenkv)
                             : flex_allowed(args, b, h, row, col, lenq, lenkv);
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
    for (int kk = 0; kk < BN / 16; kk++) {
#pragma unroll
      for (int n = 0; n < DT; n += 2) {
        unsigned bb[4];
        flex_ldm_x4_t(bb[0], bb[1], bb[2], bb[3],
                      flex_bk_addr(cK, kk * 16, n * 8, lane));
        flex_mma(dq[n], pk[kk], bb);
        flex_mma(dq[n + 1], pk[kk], bb + 2);
      }
    }
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
