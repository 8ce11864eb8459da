// flex_fwd.cu: block-sparse flex attention forward (FlashAttention-2 style)
// on mma.sync: the portable kernel, sm_80 and later.
//
//   out[b,h,i,:] = sum_j softmax_j(score(q_i . k_j * scale) | mask) v_j
//   lse[b,h,i]   = log sum_{j allowed} exp(score(q_i . k_j * scale))
//
// (out laid out as o_hi says, flex_o_head). One CTA computes FLEX_BQ query
// rows of one (batch, query head); each warp owns FLEX_FWD_MT tiles of 16
// rows (two reuse every K and V fragment read from shared memory). The grid
// is (heads x batch, q blocks), the heaviest q blocks of every head
// dispatched first. A CTA visits only the non-empty kv blocks of its q
// block: the partial list (mask evaluated per element) then the full list
// (no mask). K and V tiles of FLEX_FWD_BN rows are
// double-buffered with cp.async; S = Q K^T and O += P V run on mma.sync
// m16n8k16 with fp32 accumulation; softmax is online in the log2 domain.
// Rows with no allowed key get out 0, lse -inf. GQA: query head h reads kv
// head h / FLEX_GROUP (no copies).
//
// Tiles (flex/flexcuda Spec.defines): FLEX_FWD_NT threads, FLEX_FWD_MT row
// tiles per warp, FLEX_FWD_BN kv rows per stage, FLEX_FWD_QREGS 1 to keep
// Q's fragments in registers.
#include "flex_common.cuh"

#if !defined(FLEX_FWD_NT) || !defined(FLEX_FWD_MT) || !defined(FLEX_FWD_BN) || !defined(FLEX_FWD_QREGS)
#error "flex_fwd.cu: FLEX_FWD_NT, FLEX_FWD_MT, FLEX_FWD_BN and FLEX_FWD_QREGS come from the generator (flex/flexcuda)"
#endif
#define FLEX_FWD_ROWS (16 * FLEX_FWD_MT) // q rows per warp

static_assert(FLEX_BKV % FLEX_FWD_BN == 0 && FLEX_FWD_BN % 16 == 0, "kv block must be a multiple of BN");
static_assert(FLEX_D % 64 == 0, "head dim must be a multiple of 64");
static_assert(FLEX_FWD_NT / 32 * FLEX_FWD_ROWS == FLEX_BQ, "the warps' rows must make the q block");

extern "C" __global__ void __launch_bounds__(FLEX_FWD_NT)
    flex_fwd(FLEX_FWD_PARAMS FLEX_ARG_PARAMS) {
  const FlexArgs args = {{FLEX_ARG_VALUES}};
  constexpr int D = FLEX_D, BQ = FLEX_BQ, BN = FLEX_FWD_BN, NT = FLEX_FWD_NT;
  constexpr int MT = FLEX_FWD_MT;
  constexpr int NTILE = BN / 8; // n8 tiles of S per row tile
  constexpr int DT = D / 8;     // n8 tiles of O per row tile

  extern __shared__ __align__(128) unsigned char flex_smem[];
  flex_t *sQ, *sK, *sV; // [BQ][D], [2][BN][D] each
  int *sIdx;            // [npart + nfull] kv block ids
  flex_carve(flex_smem, sQ, BQ * D, sK, 2 * BN * D, sV, 2 * BN * D, sIdx);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const FlexQBlock cta = flex_q_block(heads_q);
  const int qb = cta.qb, h = cta.h, b = cta.b, q0 = cta.q0;
  const long long kvoff = ((long long)(b * cta.heads_kv + cta.hk) * lenkv) * D;
  const flex_t *gQ = Q + ((long long)(b * heads_q + h) * lenq) * D;

  // The block list moves to shared memory once, off the loop's critical path.
  const FlexBlocks blk = flex_blocks(sIdx, kv_num, kv_idx, full_num, full_idx, b, h, qb,
                                     bm_batch, bm_heads, nqb, nkvb, tid, NT);
  const int ntiles = blk.tiles<FLEX_BKV, BN>();
  const FlexKVStream<BN, NT> kv{sK, sV, K + kvoff, V + kvoff, blk, ntiles, lenkv, tid};

  flex_load_tile<BQ, NT>(sQ, gQ, q0, lenq, tid);
  kv.prefetch(0, 0);

  float acc[MT][DT][4];
  flex_zero(acc);
  // Row state per row tile: [mt][0] row lane/4, [mt][1] row lane/4 + 8.
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
    m[mt][0] = m[mt][1] = FLEX_NEG_INF, l[mt][0] = l[mt][1] = 0.f;
  const int wrow = warp * FLEX_FWD_ROWS;
  const int rbase = q0 + wrow + (lane >> 2);
  const float sl2 = scale * FLEX_LOG2E;

#if FLEX_FWD_QREGS
  unsigned qf[MT][D / 16][4];
#endif

  for (int t = 0; t < ntiles; t++) {
    const int st = t & 1;
    bool full;
    const int kv0 = kv.begin(t, full);

#if FLEX_FWD_QREGS
    if (t == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
          flex_ldm_x4(qf[mt][kk], flex_a_addr(sQ, wrow + mt * 16, kk * 16, lane));
    }
#endif
    const flex_t *cK = sK + st * BN * D;
    const flex_t *cV = sV + st * BN * D;

    // S = Q K^T for this warp's MT x 16 rows x BN columns; every K fragment
    // feeds MT row tiles.
    float s[MT][NTILE][4];
    flex_zero(s);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      unsigned a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
#if FLEX_FWD_QREGS
        a[mt][0] = qf[mt][kk][0]; a[mt][1] = qf[mt][kk][1];
        a[mt][2] = qf[mt][kk][2]; a[mt][3] = qf[mt][kk][3];
#else
        flex_ldm_x4(a[mt], flex_a_addr(sQ, wrow + mt * 16, kk * 16, lane));
#endif
      }
      flex_mma_rows<MT, NTILE, false>(s, a, cK, kk * 16, 0, lane);
    }

#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      const int r0 = rbase + mt * 16, r1 = r0 + 8;
      // Scores in the log2 domain, masked.
      float mx0 = FLEX_NEG_INF, mx1 = FLEX_NEG_INF;
#pragma unroll
      for (int n = 0; n < NTILE; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int row = e < 2 ? r0 : r1;
          const int col = kv0 + flex_acc_col(n, e, lane);
          const bool ok = flex_ok(args, full, b, h, row, col, lenq, lenkv);
          float x = FLEX_NEG_INF;
          if (ok) {
#if FLEX_HAS_SCORE
            x = flex_score(args, s[mt][n][e] * scale, b, h, row, col) *
                FLEX_LOG2E;
#else
            x = s[mt][n][e] * sl2;
#endif
          }
          s[mt][n][e] = x;
        }
        mx0 = fmaxf(mx0, fmaxf(s[mt][n][0], s[mt][n][1]));
        mx1 = fmaxf(mx1, fmaxf(s[mt][n][2], s[mt][n][3]));
      }
      mx0 = flex_quad_max(mx0);
      mx1 = flex_quad_max(mx1);
      const float mn0 = fmaxf(m[mt][0], mx0), mn1 = fmaxf(m[mt][1], mx1);
      const float ms0 = mn0 == FLEX_NEG_INF ? 0.f : mn0;
      const float ms1 = mn1 == FLEX_NEG_INF ? 0.f : mn1;
      const float c0 = exp2f(m[mt][0] - ms0), c1 = exp2f(m[mt][1] - ms1);
      m[mt][0] = mn0;
      m[mt][1] = mn1;
      float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
      for (int n = 0; n < NTILE; n++) {
        s[mt][n][0] = exp2f(s[mt][n][0] - ms0);
        s[mt][n][1] = exp2f(s[mt][n][1] - ms0);
        s[mt][n][2] = exp2f(s[mt][n][2] - ms1);
        s[mt][n][3] = exp2f(s[mt][n][3] - ms1);
        ps0 += s[mt][n][0] + s[mt][n][1];
        ps1 += s[mt][n][2] + s[mt][n][3];
      }
      l[mt][0] = l[mt][0] * c0 + ps0; // quad-partial sums; reduced at the end
      l[mt][1] = l[mt][1] * c1 + ps1;
#pragma unroll
      for (int i = 0; i < DT; i++) {
        acc[mt][i][0] *= c0; acc[mt][i][1] *= c0;
        acc[mt][i][2] *= c1; acc[mt][i][3] *= c1;
      }
    }

    // O += P V: P from registers as the A operand, V via ldmatrix.trans;
    // every V fragment feeds MT row tiles.
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
      unsigned a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
        flex_frag_a(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
      flex_mma_rows<MT, DT, true>(acc, a, cV, kk * 16, 0, lane);
    }
    __syncthreads(); // stage st is refilled by the next iteration's prefetch
  }
  flex_cp_wait<0>();

  flex_t *gO = O + flex_o_head(b, h, heads_q, lenq, o_hi);
  const int ld = flex_o_ld(heads_q, o_hi);
  float *gL = LSE + (long long)(b * heads_q + h) * lenq;
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    const int r0 = rbase + mt * 16, r1 = r0 + 8;
    const float l0 = flex_quad_sum(l[mt][0]);
    const float l1 = flex_quad_sum(l[mt][1]);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f;
    const float inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
    for (int n = 0; n < DT; n++) {
      const int col = n * 8 + (lane & 3) * 2;
      if (r0 < lenq)
        *(unsigned *)(gO + (long long)r0 * ld + col) =
            flex_pack2(acc[mt][n][0] * inv0, acc[mt][n][1] * inv0);
      if (r1 < lenq)
        *(unsigned *)(gO + (long long)r1 * ld + col) =
            flex_pack2(acc[mt][n][2] * inv1, acc[mt][n][3] * inv1);
    }
    if ((lane & 3) == 0) {
      if (r0 < lenq)
        gL[r0] = l0 > 0.f ? (m[mt][0] + __log2f(l0)) * FLEX_LN2 : FLEX_NEG_INF;
      if (r1 < lenq)
        gL[r1] = l1 > 0.f ? (m[mt][1] + __log2f(l1)) * FLEX_LN2 : FLEX_NEG_INF;
    }
  }
}

