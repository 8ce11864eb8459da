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
#include "flex_fwd_wg.cuh" // the products, softmax and store of one warpgroup

#define FLEX_WG_NWG (FLEX_BQ / 64)
#define FLEX_WG_NT (FLEX_WG_NWG * 128)

extern "C" __global__ void __launch_bounds__(FLEX_WG_NT, 1)
    flex_fwd(FLEX_FWD_PARAMS FLEX_ARG_PARAMS) {
  const FlexArgs args = {{FLEX_ARG_VALUES}};
  constexpr int D = FLEX_D, BQ = FLEX_BQ, BN = FLEX_WG_BN, NT = FLEX_WG_NT;
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
  const int r0 = q0 + wg * 64 + wq * 16 + (lane >> 2);
  FlexRows rs = {r0, r0 + 8, FLEX_NEG_INF, FLEX_NEG_INF, 0.f, 0.f};

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
    float c0, c1;
    flex_wg_softmax(sc, args, b, h, kv0, full, lane, lenq, lenkv, scale, rs, c0, c1);
    unsigned p[BN / 16][4];
    flex_wg_pack(p, sc);
    flex_wg_rescale(o, c0, c1);
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

  flex_wg_store(O + ((long long)(b * heads_q + h) * lenq) * D, LSE + (long long)(b * heads_q + h) * lenq,
                o, rs, lane, lenq);
}
