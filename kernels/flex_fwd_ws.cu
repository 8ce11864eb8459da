// flex_fwd_ws.cu: block-sparse flex attention forward on Hopper, warp
// specialised (sm_90a): the Hopper kernel. Same contract as flex_fwd.cu:
//
//   out[b,h,i,:] = sum_j softmax_j(score(q_i . k_j * scale) | mask) v_j
//   lse[b,h,i]   = log sum_{j allowed} exp(score(q_i . k_j * scale))
//
// (out laid out as o_hi says, flex_o_head). One CTA computes FLEX_BQ query
// rows of one (batch, query head) with one
// producer warpgroup and FLEX_BQ/64 consumer warpgroups of 64 rows each;
// the grid is (heads x batch, q blocks), heaviest q blocks first.
//
// Producer: one thread issues tensor-memory-access copies (TMA) of Q and of
// every K and V tile into FLEX_WS_ST stages; each stage has a "full"
// mbarrier (the copy's bytes land) and an "empty" one (every consumer is
// done reading it). The producer gives its registers to the consumers
// (setmaxnreg), so these hold S, P and O without spilling.
//
// Consumers, per kv tile t (the products on warpgroup MMA, flex_fwd_wg.cuh):
//   issue S(t+1) = Q K(t+1)^T and O += P(t) V(t); wait for S(t+1) and free
//   K(t+1); online softmax of S(t+1) while P(t) V(t) runs; wait for it and
//   free V(t); rescale O and pack P(t+1).
// With two consumers, named barriers make them take turns issuing their
// products (ping-pong): one warpgroup's softmax runs on the FP32 and SFU
// units while the other's products run on the tensor cores.
//
// Only the non-empty kv blocks are visited, the partial ones first (mask per
// element), then the full ones (no mask). GQA: query head h reads kv head
// h / FLEX_GROUP (no copies). Rows past the lengths come in as zeros (the
// tensor maps' extents are the lengths).
//
// Tiles (flex/flexcuda Spec.defines): FLEX_FWD_NT threads, FLEX_WG_BN kv rows
// per tile, FLEX_WS_ST K and V stages. (The variant whose two consumers do
// not take turns was tuning switch FLEX_WS_PP=0: kernels/dev/README.md.)
#include "flex_common.cuh"
#include "flex_wgmma.cuh"
#include "flex_fwd_wg.cuh" // the products, softmax and store of one warpgroup

#if !defined(FLEX_FWD_NT) || !defined(FLEX_WS_ST)
#error "flex_fwd_ws.cu: FLEX_FWD_NT and FLEX_WS_ST come from the generator (flex/flexcuda)"
#endif
#define FLEX_WG_NWG (FLEX_BQ / 64) // consumer warpgroups
static_assert((FLEX_WG_NWG + 1) * 128 == FLEX_FWD_NT, "a producer and a consumer warpgroup per 64 q rows");
#define FLEX_WS_TURNS (FLEX_WG_NWG == 2) // the consumers take turns (ping-pong)

extern "C" __global__ void __launch_bounds__(FLEX_FWD_NT, 1)
    flex_fwd(FLEX_FWD_PARAMS, FLEX_TMAP_PARAMS FLEX_ARG_PARAMS) {
  const FlexArgs args = {{FLEX_ARG_VALUES}};
  constexpr int D = FLEX_D, BQ = FLEX_BQ, BN = FLEX_WG_BN, ST = FLEX_WS_ST, NWG = FLEX_WG_NWG;
  constexpr int SUB = FLEX_BKV / BN;
  constexpr unsigned TILE_BYTES = BN * D * 2;

  extern __shared__ __align__(1024) unsigned char flex_smem_raw[];
  flex_t *sQ, *sK, *sV; // [BQ*D], [ST][BN*D] each
  unsigned long long *fullQ, *fullK, *fullV, *emptyK, *emptyV; // mbarriers: 1, ST each
  int *sIdx; // [npart + nfull] kv block ids
  flex_carve(flex_smem_1024(flex_smem_raw), sQ, BQ * D, sK, ST * BN * D, sV, ST * BN * D, fullQ, 1,
             fullK, ST, fullV, ST, emptyK, ST, emptyV, ST, sIdx);

  const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7;
  const FlexQBlock cta = flex_q_block(heads_q);
  const int qb = cta.qb, h = cta.h, b = cta.b, hk = cta.hk, heads_kv = cta.heads_kv, q0 = cta.q0;

  if (tid == 0) {
    flex_mbar_init(fullQ, 1);
    for (int s = 0; s < ST; s++) {
      flex_mbar_init(fullK + s, 1);
      flex_mbar_init(fullV + s, 1);
      flex_mbar_init(emptyK + s, NWG);
      flex_mbar_init(emptyV + s, NWG);
    }
    flex_mbar_fence_init();
  }
  // The block list moves to shared memory (its barrier also publishes the
  // mbarriers).
  const FlexBlocks blk = flex_blocks(sIdx, kv_num, kv_idx, full_num, full_idx, b, h, qb,
                                     bm_batch, bm_heads, nqb, nkvb, tid, FLEX_FWD_NT);
  const int ntiles = blk.tiles<FLEX_BKV, BN>();

  if (wg == 0) { // producer
#if FLEX_WG_NWG == 2
    flex_regs_dec<24>();
#endif
    if (tid == 0 && ntiles > 0) { // (nothing in flight when the CTA ends)
      const int zq = b * heads_q + h, zk = b * heads_kv + hk;
      flex_mbar_expect(fullQ, BQ * D * 2);
#pragma unroll
      for (int c = 0; c < D / 64; c++)
        flex_tma_load3(sQ + c * BQ * 64, &tmQ, c * 64, q0, zq, fullQ);
      for (int t = 0; t < ntiles; t++) {
        const int s = t % ST;
        const unsigned ph = (t / ST) & 1;
        bool f;
        const int kv0 = blk.start<FLEX_BKV, BN>(t, f);
        flex_mbar_wait(emptyK + s, ph ^ 1);
        flex_mbar_expect(fullK + s, TILE_BYTES);
#pragma unroll
        for (int c = 0; c < D / 64; c++)
          flex_tma_load3(sK + s * BN * D + c * BN * 64, &tmK, c * 64, kv0, zk, fullK + s);
        flex_mbar_wait(emptyV + s, ph ^ 1);
        flex_mbar_expect(fullV + s, TILE_BYTES);
#pragma unroll
        for (int c = 0; c < D / 64; c++)
          flex_tma_load3(sV + s * BN * D + c * BN * 64, &tmV, c * 64, kv0, zk, fullV + s);
      }
    }
    return;
  }

#if FLEX_WG_NWG == 2
  flex_regs_inc<240>();
#endif
  const int cw = wg - 1;         // consumer warpgroup: rows [64 cw, +64) of the q block
  const int wq = (tid >> 5) & 3; // warp within the warpgroup
  const bool signal = (tid & 127) == 0;
  const int r0 = q0 + cw * 64 + wq * 16 + (lane >> 2);
  FlexRows rs = {r0, r0 + 8, FLEX_NEG_INF, FLEX_NEG_INF, 0.f, 0.f};
  // Turns: consumer c issues its products after bar.sync on barrier 1+c and
  // hands the turn over by arriving on the other's; consumer 1 lets
  // consumer 0 go first.
  auto turn_take = [&]() {
    if (FLEX_WS_TURNS)
      flex_bar_sync(1 + cw, 256);
  };
  auto turn_give = [&]() {
    if (FLEX_WS_TURNS)
      flex_bar_arrive(2 - cw, 256);
  };
  if (FLEX_WS_TURNS && cw == 1)
    flex_bar_arrive(1, 256);

  float o[D / 2];
  flex_zero(o);
  float s[BN / 2];
  unsigned p[BN / 16][4];
  if (ntiles > 0) {
    flex_mbar_wait(fullQ, 0);
    flex_mbar_wait(fullK, 0);
    turn_take();
    flex_wg_fence();
    flex_wg_qk(s, sQ, sK, cw);
    flex_wg_commit();
    turn_give();
    flex_wg_wait<0>();
    if (signal)
      flex_mbar_arrive(emptyK);
    bool full;
    const int kv0 = blk.start<FLEX_BKV, BN>(0, full);
    float c0, c1;
    flex_wg_softmax(s, args, b, h, kv0, full, lane, lenq, lenkv, scale, rs, c0, c1);
    flex_wg_pack(p, s);
    // step(t, full) issues S(t+1) and P(t) V(t) and runs tile t+1's
    // softmax. It is written out twice, for the partial tiles (mask program)
    // and the full ones (bounds only), so that a full tile never pays for
    // the mask: the tiles come partial first.
    auto step = [&](int t, const bool full_tile) {
      const int sn = (t + 1) % ST, sc = t % ST;
      flex_mbar_wait(fullK + sn, ((t + 1) / ST) & 1);
      flex_mbar_wait(fullV + sc, (t / ST) & 1);
      turn_take();
      flex_wg_fence();
      flex_wg_qk(s, sQ, sK + sn * BN * D, cw);
      flex_wg_commit();
      flex_wg_pv(o, p, sV + sc * BN * D);
      flex_wg_commit();
      turn_give();
      flex_wg_wait<1>(); // S(t+1)
      if (signal)
        flex_mbar_arrive(emptyK + sn);
      bool f;
      const int kv1 = blk.start<FLEX_BKV, BN>(t + 1, f);
      flex_wg_softmax(s, args, b, h, kv1, full_tile, lane, lenq, lenkv, scale, rs, c0, c1);
      flex_wg_wait<0>(); // P(t) V(t)
#pragma unroll
      for (int kk = 0; kk < BN / 16; kk++)
        flex_wg_keep(p[kk]);
      if (signal)
        flex_mbar_arrive(emptyV + sc);
      flex_wg_rescale(o, c0, c1);
      flex_wg_pack(p, s);
    };
    const int npart = blk.npart * SUB;
    int t = 0;
    for (; t + 1 < npart; t++)
      step(t, false);
    for (; t + 1 < ntiles; t++)
      step(t, true);
    const int sl = (ntiles - 1) % ST;
    flex_mbar_wait(fullV + sl, ((ntiles - 1) / ST) & 1);
    turn_take();
    flex_wg_fence();
    flex_wg_pv(o, p, sV + sl * BN * D);
    flex_wg_commit();
    turn_give();
    flex_wg_wait<0>();
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
      flex_wg_keep(p[kk]);
  }
  if (FLEX_WS_TURNS && cw == 0)
    flex_bar_sync(1, 256); // consumer 1's last hand-over
  flex_wg_store(O + flex_o_head(b, h, heads_q, lenq, o_hi), flex_o_ld(heads_q, o_hi),
                LSE + (long long)(b * heads_q + h) * lenq, o, rs, lane, lenq);
}
