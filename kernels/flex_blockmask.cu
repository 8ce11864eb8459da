// flex_blockmask.cu: builds a flex BlockMask on the GPU, in O(blocks) memory.
//
// The lists have flex.BlockMask's layout: with r = bh * nqb + qb (bh = b *
// mask_heads + h), kv_num[r] partial kv blocks of q block qb are
// kv_idx[r * nkvb ...], ascending, and full_num / full_idx the full ones; with
// c = bh * nkvb + kvb, q_num / q_idx and fullq_num / fullq_idx list the q
// blocks of kv block kvb. Entries past the counts are not written.
//
// Generic path, any mask program: flex_bm_classify evaluates the program on
// the pairs of each block (one warp per block, stopping as soon as it has seen
// an allowed and a masked pair) and writes one class byte per block (0 empty,
// 1 partial, 2 full); flex_bm_compact turns the classes into the lists, one
// warp per q-block row and per kv-block column.
//
// DFlash path (FLEX_DFLASH_BLOCK defined: the mask is flex.DFlashMask with
// that draft block size): flex_bm_dflash classifies each block in closed form
// from the context interval [block_starts, anchor) of each of the block's
// draft blocks, the context length and num_valid, and writes the lists in the
// same launch.
//
// Builds alone: nvcc -arch=sm_90 -cubin -DFLEX_DFLASH_BLOCK=16 kernels/flex_blockmask.cu
#include "flex_args.cuh"

#define FLEX_BM_FULLMASK 0xffffffffu

// flex_bm_emit appends the indices i in [0, n) whose class get(i) is 1 to
// idx (count to *num) and those of class 2 to fidx (count to *fnum), in
// ascending order; the whole warp calls it.
template <class F>
__device__ __forceinline__ void flex_bm_emit(int n, F get, int *num, int *idx,
                                             int *fnum, int *fidx, int lane) {
  int np = 0, nf = 0;
  const unsigned lt = (1u << lane) - 1;
  for (int base = 0; base < n; base += 32) {
    const int i = base + lane;
    const int c = i < n ? get(i) : 0;
    const unsigned pm = __ballot_sync(FLEX_BM_FULLMASK, c == 1);
    const unsigned fm = __ballot_sync(FLEX_BM_FULLMASK, c == 2);
    if (c == 1)
      idx[np + __popc(pm & lt)] = i;
    if (c == 2)
      fidx[nf + __popc(fm & lt)] = i;
    np += __popc(pm);
    nf += __popc(fm);
  }
  if (lane == 0) {
    *num = np;
    *fnum = nf;
  }
}

// FLEX_BM_LIST_PARAMS are the eight lists a builder writes, in
// flex.BlockMask's order; FLEX_BM_LISTS passes them on.
#define FLEX_BM_LIST_PARAMS                                                    \
  int *__restrict__ kv_num, int *__restrict__ kv_idx,                          \
      int *__restrict__ full_num, int *__restrict__ full_idx,                  \
      int *__restrict__ q_num, int *__restrict__ q_idx,                        \
      int *__restrict__ fullq_num, int *__restrict__ fullq_idx
#define FLEX_BM_LISTS kv_num, kv_idx, full_num, full_idx, q_num, q_idx, fullq_num, fullq_idx

// flex_bm_lists is the body of a launch that writes every list of nbh (batch
// x mask heads) masks of nqb x nkvb blocks, a warp a list: warps [0,
// nbh*nqb) write the kv lists of one q-block row, the next nbh*nkvb warps
// the q lists of one kv-block column; cls(bh, qb, kvb) is a block's class.
template <class F>
__device__ __forceinline__ void flex_bm_lists(int nbh, int nqb, int nkvb, F cls, FLEX_BM_LIST_PARAMS) {
  const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  const long long rows = (long long)nbh * nqb;
  if (w < rows) {
    const int bh = (int)(w / nqb), qb = (int)(w % nqb);
    flex_bm_emit(nkvb, [&](int kvb) { return cls(bh, qb, kvb); }, kv_num + w, kv_idx + w * nkvb,
                 full_num + w, full_idx + w * nkvb, lane);
  } else if (w < rows + (long long)nbh * nkvb) {
    const long long col = w - rows;
    const int bh = (int)(col / nkvb), kvb = (int)(col % nkvb);
    flex_bm_emit(nqb, [&](int qb) { return cls(bh, qb, kvb); }, q_num + col, q_idx + col * nqb,
                 fullq_num + col, fullq_idx + col * nqb, lane);
  }
}

// flex_bm_classify: warp w classifies block (bh, qb, kvb) with w = (bh * nqb +
// qb) * nkvb + kvb.
extern "C" __global__ void __launch_bounds__(256)
    flex_bm_classify(unsigned char *__restrict__ cls, int lenq, int lenkv,
                     int mask_heads, int nbh, int nqb, int nkvb, int bq,
                     int bkv FLEX_ARG_PARAMS) {
  const FlexArgs args = {{FLEX_ARG_VALUES}};
  const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= (long long)nbh * nqb * nkvb)
    return;
  const int kvb = (int)(w % nkvb);
  const long long r = w / nkvb;
  const int qb = (int)(r % nqb), bh = (int)(r / nqb);
  const int b = bh / mask_heads, h = bh % mask_heads;
  const int q0 = qb * bq, q1 = min(q0 + bq, lenq);
  const int k0 = kvb * bkv, k1 = min(k0 + bkv, lenkv);
  bool anyT = false, anyF = false;
  for (int q = q0; q < q1 && !(anyT && anyF); q++) {
    for (int kc = k0; kc < k1; kc += 32) {
      const int kv = kc + lane;
      const bool in = kv < k1;
      const bool v = in && flex_mask(args, b, h, q, kv);
      anyT |= __any_sync(FLEX_BM_FULLMASK, v);
      anyF |= __any_sync(FLEX_BM_FULLMASK, in && !v);
      if (anyT && anyF)
        break;
    }
  }
  if (lane == 0)
    cls[w] = anyT ? (anyF ? 1 : 2) : 0;
}

// flex_bm_compact turns flex_bm_classify's class bytes ([nbh][nqb][nkvb])
// into the lists (flex_bm_lists).
extern "C" __global__ void __launch_bounds__(256)
    flex_bm_compact(const unsigned char *__restrict__ cls, int nbh, int nqb, int nkvb,
                    FLEX_BM_LIST_PARAMS) {
  flex_bm_lists(
      nbh, nqb, nkvb,
      [&](int bh, int qb, int kvb) { return cls[((long long)bh * nqb + qb) * nkvb + kvb]; },
      FLEX_BM_LISTS);
}

#ifdef FLEX_DFLASH_BLOCK
__device__ __forceinline__ int flex_bm_clamp(int i, int n) {
  return i < 0 ? 0 : (i >= n ? n - 1 : i);
}

// flex_dflash_class classifies block (b, qb, kvb) of the DFlash mask
//   j = q / BS valid (j < num_valid[b]) and
//   (kv < ctx and starts[b, j] <= kv < anchors[b, j]
//    or  kv >= ctx and (kv - ctx) / BS == j)
// exactly: with the block's draft blocks j0..j1 (valid ones j0..jv1), each
// seeing the context interval [s_j, a_j), some pair is allowed iff a valid
// draft block's interval meets the block's context keys [k0, kc1) or its own
// draft positions meet the block's, and every pair is allowed iff every row is
// valid, every draft block's interval holds all the block's context keys and
// the block's draft keys all belong to the one draft block that all its rows
// are in. Tensor indices are clamped as the program clamps them.
__device__ __forceinline__ int
flex_dflash_class(const int *__restrict__ anchors, int ad0, int ad1,
                  const int *__restrict__ starts, int sd0, int sd1,
                  const int *__restrict__ valid, int vd0, int ctx, int lenq,
                  int lenkv, int bq, int bkv, int b, int qb, int kvb) {
  constexpr int BS = FLEX_DFLASH_BLOCK;
  const int q0 = qb * bq, q1 = min(q0 + bq, lenq);
  const int k0 = kvb * bkv, k1 = min(k0 + bkv, lenkv);
  const int j0 = q0 / BS, j1 = (q1 - 1) / BS;
  const int nv = valid[flex_bm_clamp(b, vd0)];
  const int jv1 = min(j1, nv - 1);
  if (jv1 < j0)
    return 0;
  const int kc1 = min(k1, ctx);
  const bool hasC = k0 < kc1;
  bool anyC = false, allC = true;
  if (hasC) {
    const int *arow = anchors + (long long)flex_bm_clamp(b, ad0) * ad1;
    const int *srow = starts + (long long)flex_bm_clamp(b, sd0) * sd1;
    for (int j = j0; j <= jv1; j++) {
      const int a = arow[flex_bm_clamp(j, ad1)];
      const int st = srow[flex_bm_clamp(j, sd1)];
      anyC |= max(k0, st) < min(kc1, a);
      allC &= st <= k0 && kc1 <= a;
    }
  }
  const int kd0 = max(k0, ctx);
  const bool hasD = kd0 < k1;
  const int pd0 = kd0 - ctx, pd1 = k1 - ctx;
  const bool anyD = hasD && max(BS * j0, pd0) < min(BS * (jv1 + 1), pd1);
  if (!anyC && !anyD)
    return 0;
  const bool allD =
      !hasD || (j0 == j1 && pd0 / BS == j0 && (pd1 - 1) / BS == j0);
  return (j1 < nv && allC && allD) ? 2 : 1;
}

// flex_bm_dflash builds the whole DFlash BlockMask (mask_heads 1, one entry
// per batch element) in one launch (flex_bm_lists over batch masks).
extern "C" __global__ void __launch_bounds__(256)
    flex_bm_dflash(const int *__restrict__ anchors, int ad0, int ad1,
                   const int *__restrict__ starts, int sd0, int sd1,
                   const int *__restrict__ valid, int vd0, int ctx, int lenq,
                   int lenkv, int batch, int nqb, int nkvb, int bq, int bkv,
                   FLEX_BM_LIST_PARAMS) {
  flex_bm_lists(
      batch, nqb, nkvb,
      [&](int b, int qb, int kvb) {
        return flex_dflash_class(anchors, ad0, ad1, starts, sd0, sd1, valid, vd0, ctx, lenq, lenkv,
                                 bq, bkv, b, qb, kvb);
      },
      FLEX_BM_LISTS);
}
#endif
