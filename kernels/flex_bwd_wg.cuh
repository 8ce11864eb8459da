// flex_bwd_wg.cuh: flex_bwd_dkdv on Hopper warpgroup MMA (sm_90a), the
// Hopper backward, included by flex_bwd.cu when FLEX_BWD_WG is 1. Same
// parameters, grid and results as the portable kernel there (atomic dQ;
// FLEX_BWD_SPLIT 0 or 1).
//
// One CTA per kv block of 128 rows; warpgroup w owns kv rows [64w, 64w+64).
// Per q tile of FLEX_BMQ rows (64; 32 at head dim 256), in cp.async stages:
//   S^T  = K_w Q^T, dP^T = V_w dO^T      wgmma m64nBM, A and B from smem
//   P^T, dS^T elementwise (mask, lse, Dlt, score program)
//   dV_w += P^T dO, dK_w += dS^T Q        wgmma m64nD, A = P^T / dS^T from
//                                         registers, B = dO / Q transposed
//   dQ   += dS K                          dS^T through shared memory (A
//                                         transposed, rows padded to 64),
//                                         K transposed; D 128: warpgroup w
//                                         takes columns [64w,+64), D 64:
//                                         [32w,+32); fp32 vector atomics
//                                         into dQacc (or FLEX_BWD_BULK)
// FLEX_BWD_HALF (head dim 256): dK and dV of 64 kv rows x 256 would take 256
// registers per thread, so two CTAs share each kv block, CTA half hd
// (flex_bwd_half) computing dK, dV and dQ for columns [128hd, 128hd+128);
// both compute the full S^T, dP^T and dS^T, and only half 0 adds the score
// tensors' gradients (flex_common.cuh).
//
// FLEX_BWD_PROD (head dims 64 and 128; the "v7 treatment" of the forward,
// flex_fwd_ws.cu): a third, producer warpgroup feeds the two above. One of
// its threads issues tensor-memory-access copies (TMA, tensor maps tmQ and
// tmdO of 64-column boxes by FLEX_BMQ rows) of Q and dO into the stages, and
// its first warp copies LSE and Dlt there; each stage has a "full" mbarrier
// (the copies landed and the 32 lanes stored LSE, Dlt) and an "empty" one
// (all 256 consumer threads are done with it). The consumers then issue no
// copies, and the CTA-wide barrier of each tile becomes a named barrier of
// the two consumers (still needed: dQ reads both warpgroups' dS^T). The
// producer gives its registers to the consumers (setmaxnreg 24 / 240).
// Needs one query head per CTA (FLEX_BWD_SPLIT with GQA, as the Hopper
// backward always has).
//
// FLEX_BWD_BULK (with the producer, so head dims 64 and 128): a consumer
// warpgroup stores its dQ product of a tile (64 q rows by its columns, fp32,
// already scaled) into its own shared buffer instead of issuing 16 vector atomics per thread; one
// of its threads then has the copy engine add the buffer to dQacc
// (cp.reduce.async.bulk.tensor through tensor map tmdQ over [batch*heads][
// lenq][D] fp32, which leaves rows past lenq alone) and the warpgroup goes
// on with the next tile while it runs. One buffer per warpgroup: its next
// write is a whole tile later, after that thread's wait for the copy's reads
// and the tile's barrier. At head dim 128 the two 16 KB buffers take the
// third Q/dO stage's room (flex/flexcuda Spec.bwdStages).
//
// Tiles (flex/flexcuda Spec.defines): FLEX_BMQ q rows per tile, FLEX_BWD_STAGES
// Q/dO stages, FLEX_BWD_DS_BUFS dS^T buffers. The superseded variants (no
// producer or dQ by atomics at head dims 64 and 128, dQ of head dim 64 split
// by kv rows, full tiles through the mask program: the tuning switches
// FLEX_BWD_WS, FLEX_BWD_DQ_BULK, FLEX_BWD_DQ_COLS and FLEX_BWD_TWO_PATHS set
// to 0) are described in kernels/dev/README.md.
#pragma once
#include "flex_wgmma.cuh"

#if !defined(FLEX_BWD_STAGES) || !defined(FLEX_BWD_DS_BUFS)
#error "flex_bwd_wg.cuh: FLEX_BWD_STAGES and FLEX_BWD_DS_BUFS come from the generator (flex/flexcuda)"
#endif
// FLEX_BWD_PROD: the producer warpgroup is on, at head dims 64 and 128
// (flex/flexcuda Spec.bwdWS decides alike: the launch passes the tensor maps
// and 384 threads).
#define FLEX_BWD_PROD (!FLEX_BWD_HALF)
// FLEX_BWD_BULK: dQ through shared memory and the copy engine, with the
// producer (Spec.bwdDQBulk alike: the launch passes tensor map tmdQ and
// sizes the buffers).
#define FLEX_BWD_BULK FLEX_BWD_PROD
static_assert(FLEX_D == 64 || FLEX_D == 128 || FLEX_D == 256, "Hopper backward: head dim 64, 128 or 256");
static_assert(FLEX_BKV == 128 && FLEX_BWD_NT == (FLEX_BWD_PROD ? 384 : 256) && (FLEX_BMQ == 32 || FLEX_BMQ == 64),
              "Hopper backward: kv block 128, two consumer warpgroups (and the producer), q tile 32 or 64");
static_assert(!FLEX_BWD_PROD || FLEX_BWD_SPLIT || FLEX_GROUP == 1, "Hopper backward with a producer: one query head per CTA");
static_assert(FLEX_D >> FLEX_BWD_HALF <= 128, "Hopper backward: dK and dV of at most 128 columns per CTA fit the registers");
static_assert(FLEX_DQ_ATOMIC && FLEX_BWD_SPLIT != 2, "Hopper backward: atomic dQ only");
static_assert(FLEX_BWD_DS_BUFS == (FLEX_BWD_HALF ? 1 : 2), "Hopper backward: dQ of a tile at the top of the next one needs two dS^T buffers");
static_assert(!FLEX_BWD_BULK || FLEX_BMQ == 64, "Hopper backward with bulk dQ: the dQ product's 64 rows are all q rows of the tile");

// flex_bwd_wg_abt issues d = A B^T, k = the head dimension, as one commit
// group: A the warpgroup wg's 64 rows of the kv tile a ([D/64][BKV][64]), B
// the BM rows of the q tile b ([D/64][BM][64]); both K-major.
template <int BM>
__device__ __forceinline__ void flex_bwd_wg_abt(float (&d)[BM / 2], const flex_t *a, const flex_t *b, int wg) {
#pragma unroll
  for (int kk = 0; kk < FLEX_D / 16; kk++) {
    const int ao = (kk >> 2) * FLEX_BKV * 64 + wg * 64 * 64 + (kk & 3) * 16;
    const int bo = (kk >> 2) * BM * 64 + (kk & 3) * 16;
    flex_wgmma_ss<BM, 0, 0>(d, flex_wg_desc(a + ao, 16, 1024), flex_wg_desc(b + bo, 16, 1024), kk > 0);
  }
  flex_wg_commit();
}

#if FLEX_BWD_PROD
// flex_bwd_produce is the producer warpgroup's work (its first warp; the
// others leave at once): for every q tile t of qs's list, once stage t %
// NSTG is empty, lane 0 has Q and dO of query head h in batch b copied into
// it by the copy engine (tensor maps: tq over [batch*heads][lenq][D], z =
// b * heads + h; tdo over [batch][heads][lenq][D], coordinates (col, q row,
// h, b), or with qs.o_hi over [batch][lenq][heads][D], coordinates (col, h,
// q row, b)) and the lanes store LSE and Dlt (0 past lenq), each then
// arriving on the stage's full barrier.
template <int BM, class QS>
__device__ __forceinline__ void flex_bwd_produce(const QS &qs, unsigned long long *fullb, unsigned long long *emptyb,
                                                 const FlexTmap *tq, const FlexTmap *tdo, int b, int h, int heads_q,
                                                 int lane, bool warp0) {
  constexpr int NSTG = FLEX_BWD_STAGES, D = FLEX_D;
  flex_regs_dec<24>();
  if (!warp0)
    return;
  for (int t = 0; t < qs.ntiles; t++) {
    const int st = t % NSTG;
    bool f;
    const int q0 = qs.start(t, f);
    flex_mbar_wait(emptyb + st, ((t / NSTG) & 1) ^ 1);
    if (lane == 0) {
      flex_mbar_expect(fullb + st, 2 * BM * D * 2);
#pragma unroll
      for (int c = 0; c < D / 64; c++) {
        flex_tma_load3(qs.sQ + st * BM * D + c * BM * 64, tq, c * 64, q0, b * heads_q + h, fullb + st);
        flex_tma_load4(qs.sdO + st * BM * D + c * BM * 64, tdo, c * 64, qs.o_hi ? h : q0, qs.o_hi ? q0 : h, b,
                       fullb + st);
      }
    }
#pragma unroll
    for (int i = lane; i < BM; i += 32) {
      const int r = q0 + i;
      qs.sL[st * BM + i] = r < qs.lenq ? qs.LSE[qs.qoff + r] : 0.f;
      qs.sDl[st * BM + i] = r < qs.lenq ? qs.Dlt[qs.qoff + r] : 0.f;
    }
    flex_mbar_arrive(fullb + st);
  }
}
#if FLEX_BWD_BULK
#define FLEX_BWD_TMAPS , const __grid_constant__ FlexTmap tmQ, const __grid_constant__ FlexTmap tmdO, const __grid_constant__ FlexTmap tmdQ
#else
#define FLEX_BWD_TMAPS , const __grid_constant__ FlexTmap tmQ, const __grid_constant__ FlexTmap tmdO
#endif
#else
#define FLEX_BWD_TMAPS
#endif
extern "C" __global__ void __launch_bounds__(FLEX_BWD_NT, 1)
    flex_bwd_dkdv(FLEX_DKDV_PARAMS FLEX_BWD_TMAPS FLEX_ARG_PARAMS) {
  const FlexArgs args = {{FLEX_ARG_VALUES}};
  constexpr int D = FLEX_D, BKV = FLEX_BKV, BM = FLEX_BMQ, NT = 256;
  constexpr int NTILE = BM / 8;
  constexpr bool HALF = FLEX_BWD_HALF;   // two CTAs per kv block, one per half of D
  constexpr int DD = HALF ? D / 2 : D;   // dK, dV, dQ columns of this CTA
  constexpr int NSTG = FLEX_BWD_STAGES;  // Q/dO stages (shared memory)
  constexpr int NSDS = FLEX_BWD_DS_BUFS; // dS^T buffers
  constexpr bool PROD = FLEX_BWD_PROD;   // a producer warpgroup (warpgroup 0) feeds the stages
  constexpr bool BULK = FLEX_BWD_BULK;   // dQ tiles added to dQacc by the copy engine
  // The dQ product's split: warpgroup w takes all kv rows and columns
  // [hd DD + w DQN, +DQN): 32 of them at D 64 (half the atomics of splitting
  // the kv rows), 64 otherwise.
  constexpr int DQN = FLEX_D == 64 ? 32 : 64; // dQ columns per warpgroup

  extern __shared__ __align__(1024) unsigned char flex_smem_raw[];
  flex_t *sK, *sV;   // [D/64][BKV][64] each
  flex_t *sQ, *sdO;  // [NSTG][D/64][BM][64] each
  flex_t *sdS;       // dS^T: [NSDS][BKV][64] (one atom; q < BM used)
  float *sdQ;        // BULK: each warpgroup's dQ tile, [2][DQN/32][BM][32] (flex_wg_off32)
  float *sL, *sDl;   // [NSTG][BM] each
  unsigned long long *fullb, *emptyb; // PROD: mbarriers of the stages, NSTG each
  int *sIdx;         // q block ids
  flex_carve(flex_smem_1024(flex_smem_raw), sK, BKV * D, sV, BKV * D, sQ, NSTG * BM * D, sdO, NSTG * BM * D,
             sdS, NSDS * BKV * 64, sdQ, BULK ? 2 * DQN * BM : 0, sL, NSTG * BM, sDl, NSTG * BM, fullb, PROD ? NSTG : 0, emptyb, PROD ? NSTG : 0, sIdx);

  // tid, wg: the thread and warpgroup among the two consumers (PROD: the
  // producer is warpgroup -1).
  const int tid = threadIdx.x - (PROD ? 128 : 0), lane = threadIdx.x & 31, wg = tid >> 7;
  FlexQStream<BM, FLEX_BWD_NT, true> qs{sQ, sdO, sL, sDl, Q, dO, LSE, Dlt, lenq, (int)threadIdx.x, o_hi};
  const int wq = (tid >> 5) & 3;
  const int heads_kv = heads_q / FLEX_GROUP;
  const FlexKVBlock cta = flex_kv_block();
  const int kb = cta.kb, hk = cta.hk, b = cta.b;
  const int hd = flex_bwd_half();
  const int kv0 = kb * BKV;
  const int rl0 = wg * 64 + wq * 16 + (lane >> 2); // this thread's kv rows in the block
  const int c0 = kv0 + rl0, c1 = c0 + 8;
  const float sl2 = scale * FLEX_LOG2E;

  const long long kvoff = ((long long)(b * heads_kv + hk) * lenkv) * D;
  int h = 0; // the query head
#if FLEX_BWD_PROD
  {
    if (threadIdx.x == 0) {
      for (int s = 0; s < NSTG; s++) {
        flex_mbar_init(fullb + s, 33); // the copies' expect_tx and the 32 lanes storing LSE, Dlt
        flex_mbar_init(emptyb + s, 256);
      }
      flex_mbar_fence_init();
    }
    // The one head's list (its barrier also publishes the mbarriers).
    h = qs.head(cta, cta.g0, sIdx, q_num, q_idx, fullq_num, fullq_idx, bm_batch, bm_heads, nkvb, nqb, heads_q);
    if (tid < 0) {
      flex_bwd_produce<BM>(qs, fullb, emptyb, &tmQ, &tmdO, b, h, heads_q, lane, tid < -96);
      return;
    }
    flex_regs_inc<240>();
  }
#endif
  flex_wg_load<BKV, NT>(sK, K + kvoff, kv0, lenkv, tid);
  flex_wg_load<BKV, NT>(sV, V + kvoff, kv0, lenkv, tid);
  if constexpr (PROD) { // (without a producer, they land with the first tile)
    flex_cp_commit();
    flex_cp_wait<0>();
    flex_fence_async();
    flex_bar_sync(1, 256);
  }

  float dk[DD / 2], dv[DD / 2];
  flex_zero(dk);
  flex_zero(dv);

  for (int g = cta.g0; g < cta.g1; g++) {
    if constexpr (!PROD)
      h = qs.head(cta, g, sIdx, q_num, q_idx, fullq_num, fullq_idx, bm_batch, bm_heads, nkvb, nqb, heads_q);
    // dQ[BM x D] += dS K for the tile at q row q0d whose dS^T is in dS
    // ([kv][q], 64 rows of which BM hold data): A = dS read transposed, B = K
    // read transposed (k = kv rows). It waits for every wgmma of the
    // warpgroup and adds its part of dQ with vector atomics, or (BULK) has
    // the copy engine add it from shared memory.
    auto dq_product = [&](const flex_t *dS, int q0d) {
      const int colb = hd * DD + wg * DQN;
      float dq[DQN / 2];
      flex_wg_fence();
#pragma unroll
      for (int kk = 0; kk < BKV / 16; kk++) {
        const int kr = kk * 16;
        const unsigned long long da = flex_wg_desc(dS + kr * 64, 64 * 128, 1024);
        const unsigned long long db = flex_wg_desc(sK + (colb >> 6) * BKV * 64 + (colb & 63) + kr * 64, BKV * 128, 1024);
        flex_wgmma_ss<DQN, 1, 1>(dq, da, db, kk > 0);
      }
      flex_wg_commit();
      flex_wg_wait<0>();
#if FLEX_BWD_BULK
      // The buffer is free: its last copy's reads ended before the barrier
      // at the top of this tile (the issuing thread waited there).
      float *buf = sdQ + wg * DQN * BM;
      const int r0 = wq * 16 + (lane >> 2);
#pragma unroll
      for (int n = 0; n < DQN / 8; n++) {
        const int col = n * 8 + (lane & 3) * 2;
        *(float2 *)(buf + flex_wg_off32<BM>(r0, col)) = make_float2(dq[n * 4] * scale, dq[n * 4 + 1] * scale);
        *(float2 *)(buf + flex_wg_off32<BM>(r0 + 8, col)) = make_float2(dq[n * 4 + 2] * scale, dq[n * 4 + 3] * scale);
      }
      flex_fence_async();           // the stores, before the copy engine's reads
      flex_bar_sync(2 + wg, 128);   // of the whole warpgroup
      if ((tid & 127) == 0) {
#pragma unroll
        for (int c = 0; c < DQN / 32; c++)
          flex_tma_reduce3(&tmdQ, colb + c * 32, q0d, b * heads_q + h, buf + c * BM * 32);
        flex_bulk_commit();
      }
#else
      if (wq * 16 < BM) { // rows past BM are padding
        const int qr0 = q0d + wq * 16 + (lane >> 2), qr1 = qr0 + 8;
        float *gq = dQacc + qs.qoff * D;
#pragma unroll
        for (int n = 0; n < DQN / 8; n++) {
          const int col = colb + n * 8 + (lane & 3) * 2;
          if (qr0 < lenq)
            flex_red2(gq + (long long)qr0 * D + col, dq[n * 4] * scale, dq[n * 4 + 1] * scale);
          if (qr1 < lenq)
            flex_red2(gq + (long long)qr1 * D + col, dq[n * 4 + 2] * scale, dq[n * 4 + 3] * scale);
        }
      }
#endif
    };
    int qprev = 0; // q row of the previous tile (its dQ is still to come)
    // NSTG stages: tile t+NSTG-1 loads while tile t is processed.
    if constexpr (!PROD) {
#pragma unroll
      for (int t = 0; t < NSTG - 1; t++)
        qs.load(t, t);
    }
    for (int t = 0; t < qs.ntiles; t++) {
      const int st = t % NSTG;
      bool full;
      const int q0 = qs.start(t, full);
      if constexpr (PROD) {
        flex_mbar_wait(fullb + st, (t / NSTG) & 1); // tile t has landed
        flex_fence_async();
        if (BULK && (tid & 127) == 0)
          flex_bulk_wait_read<0>(); // the copy engine is done reading tile t-2's dQ
        flex_bar_sync(1, 256); // and both consumers are done with tile t-1's sdS
      } else {
        flex_cp_wait<NSTG - 2>(); // tile t has landed (later ones may be in flight)
        flex_fence_async();
        __syncthreads();   // and every warp is done with tile t-1 (its stage, sdS)
        qs.load(t + NSTG - 1, (t + NSTG - 1) % NSTG);
      }
      if constexpr (!HALF) {
        if (t > 0)
          dq_product(sdS + ((t - 1) & 1) * BKV * 64, qprev);
      }
      flex_t *cdS = HALF ? sdS : sdS + (t & 1) * BKV * 64; // this tile's dS^T
      const flex_t *cQ = sQ + st * BM * D, *cdO = sdO + st * BM * D;
      const float *cL = sL + st * BM, *cDl = sDl + st * BM;

      // S^T = K_w Q^T and dP^T = V_w dO^T (k = head dim), two commit groups.
      float s[BM / 2], dp[BM / 2];
      flex_wg_fence();
      flex_bwd_wg_abt<BM>(s, sK, cQ, wg);
      flex_bwd_wg_abt<BM>(dp, sV, cdO, wg);

      // P^T and dS^T: element n*4+e is kv row c0 (e < 2) or c1, q column
      // 8n + 2(lane%4) + e%2; packed as the A fragments of the next products,
      // dS^T also stored for dQ. Identity score: P while dP^T is still on the
      // tensor cores, then dS while dV is.
      unsigned pa[BM / 16][4], da[BM / 16][4];
#if FLEX_HAS_SCORE
      flex_wg_wait<0>();
#else
      flex_wg_wait<1>();
#endif
      // (Written out for partial and full tiles, so that a full tile never
      // pays for the mask.)
      auto probs = [&](const bool full_tile) {
#pragma unroll
      for (int n = 0; n < NTILE; n++) {
        float pv[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int qc = flex_acc_col(n, e, lane), row = q0 + qc, col = e < 2 ? c0 : c1;
          const bool ok = flex_ok(args, full_tile, b, h, row, col, lenq, lenkv);
#if FLEX_HAS_SCORE
          const float p = flex_bwd_score_p(args, ok, s[n * 4 + e], dp[n * 4 + e], scale, cL[qc], cDl[qc], b, h, row, col);
#else
          const float p = ok ? flex_ex2(fmaf(s[n * 4 + e], sl2, -cL[qc] * FLEX_LOG2E)) : 0.f;
#endif
          pv[e] = p;
          s[n * 4 + e] = p;
        }
        pa[n >> 1][(n & 1) * 2] = flex_pack2(pv[0], pv[1]);
        pa[n >> 1][(n & 1) * 2 + 1] = flex_pack2(pv[2], pv[3]);
      }
      };
      if (full)
        probs(true);
      else
        probs(false);

      // dV_w += P^T dO (k = q rows; B transposed: 8-row groups 1024 bytes
      // apart, 64-column atoms BM*128 bytes apart; this CTA's columns).
      constexpr int HO = DD / 64 * BM * 64; // elements from one half of D to the next
      flex_wg_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++)
        flex_wgmma_rs<DD, 1>(dv, pa[kk], flex_wg_desc(cdO + hd * HO + kk * 16 * 64, BM * 128, 1024), 1);
      flex_wg_commit();
#if !FLEX_HAS_SCORE
      flex_wg_wait<1>(); // dP^T (dV may still run)
#endif
#pragma unroll
      for (int n = 0; n < NTILE; n++) {
        float d4[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
#if FLEX_HAS_SCORE
          d4[e] = dp[n * 4 + e];
#else
          const int qc = flex_acc_col(n, e, lane);
          d4[e] = s[n * 4 + e] * (dp[n * 4 + e] - cDl[qc]);
#endif
        }
        const unsigned d01 = flex_pack2(d4[0], d4[1]), d23 = flex_pack2(d4[2], d4[3]);
        da[n >> 1][(n & 1) * 2] = d01;
        da[n >> 1][(n & 1) * 2 + 1] = d23;
        const int qc = n * 8 + (lane & 3) * 2;
        *(unsigned *)(cdS + flex_wg_off<BKV>(rl0, qc >> 3) + (qc & 7)) = d01;
        *(unsigned *)(cdS + flex_wg_off<BKV>(rl0 + 8, qc >> 3) + (qc & 7)) = d23;
      }

      // dK_w += dS^T Q.
      flex_wg_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++)
        flex_wgmma_rs<DD, 1>(dk, da[kk], flex_wg_desc(cQ + hd * HO + kk * 16 * 64, BM * 128, 1024), 1);
      flex_wg_commit();

      if constexpr (HALF) {
        // dS^T of both warpgroups is needed now: one sdS buffer.
        flex_fence_async();
        __syncthreads();
        dq_product(sdS, q0);
      } else {
        // dQ of this tile runs at the top of the next one, after the barrier
        // that is there anyway (two sdS buffers): one barrier per tile.
        flex_fence_async();
        flex_wg_wait<0>();
      }
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) {
        flex_wg_keep(pa[kk]); // read by dV and dK until the wait above
        flex_wg_keep(da[kk]);
      }
      if constexpr (PROD)
        flex_mbar_arrive(emptyb + st); // this thread's reads of the stage are over
      qprev = q0;
    }
    if constexpr (!HALF) {
      if (qs.ntiles > 0) { // the last tile's dQ
        if constexpr (PROD) {
          if (BULK && (tid & 127) == 0)
            flex_bulk_wait_read<0>();
          flex_bar_sync(1, 256);
        } else
          __syncthreads();
        dq_product(sdS + ((qs.ntiles - 1) & 1) * BKV * 64, qprev);
      }
    }
    if constexpr (!PROD) {
      flex_cp_wait<0>();
      __syncthreads();
    }
  }
  if (BULK && (tid & 127) == 0)
    flex_bulk_wait<0>(); // the CTA and its buffers stay until the last adds are done

  flex_dkv_t *gK = dK + kvoff, *gV = dV + kvoff;
#pragma unroll
  for (int n = 0; n < DD / 8; n++) {
    const int col = hd * DD + n * 8 + (lane & 3) * 2;
    if (c0 < lenkv) {
      flex_bwd_put(gK + (long long)c0 * D + col, dk[n * 4] * scale, dk[n * 4 + 1] * scale);
      flex_bwd_put(gV + (long long)c0 * D + col, dv[n * 4], dv[n * 4 + 1]);
    }
    if (c1 < lenkv) {
      flex_bwd_put(gK + (long long)c1 * D + col, dk[n * 4 + 2] * scale, dk[n * 4 + 3] * scale);
      flex_bwd_put(gV + (long long)c1 * D + col, dv[n * 4 + 2], dv[n * 4 + 3]);
    }
  }
}
