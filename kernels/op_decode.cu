// op_decode.cu: decoding with a KV cache (tensor.Backend's CacheRows and
// DecodeAttention): rows appended to a cache [heads, max_len, head_dim],
// and the attention of a few query rows (1..16 per head) over a long cache,
// split over the cache across thread blocks (flash-decoding): each block
// attends its group's rows to one range of keys and writes an unnormalised
// partial output with its running max and sum, and op_decode_combine merges
// the splits. Scores, softmax and sums are fp32 whatever the storage.
//
// Block shapes from the Go launcher (tensor/tensorcuda compileOptions); a
// standalone build: nvcc -arch=sm_90 -Xptxas -v -c -DOP_BF16=1 -DOP_ROW_VECS=8
// -DOP_DEC_ROWS=16 -DOP_DEC_WARPS=4 -DOP_DEC_MAX_D=128 -DOP_DEC_MAX_SPLITS=1024
// kernels/op_decode.cu
#include "op_common.cuh"

// OP_DEC_ROWS: query rows per block (a kv head's group rows, in chunks);
// OP_DEC_WARPS: warps per block, each taking every OP_DEC_WARPS-th row;
// OP_DEC_MAX_D: the largest head dimension (a multiple of 32);
// OP_DEC_MAX_SPLITS: the most splits op_decode_combine merges.
#ifndef OP_DEC_ROWS
#error "OP_DEC_ROWS is set by the Go launcher (-DOP_DEC_ROWS=16)"
#endif
#ifndef OP_DEC_WARPS
#error "OP_DEC_WARPS is set by the Go launcher (-DOP_DEC_WARPS=4)"
#endif
#ifndef OP_DEC_MAX_D
#error "OP_DEC_MAX_D is set by the Go launcher (-DOP_DEC_MAX_D=128)"
#endif
#ifndef OP_DEC_MAX_SPLITS
#error "OP_DEC_MAX_SPLITS is set by the Go launcher (-DOP_DEC_MAX_SPLITS=1024)"
#endif

#define DEC_TILE 32 // keys per tile: one per lane
#define DEC_RPW (OP_DEC_ROWS / OP_DEC_WARPS)
#define DEC_DPL (OP_DEC_MAX_D / 32) // head elements per lane, at most

// op_cache_rows: cache[h, past+t, :] = src[h, t, :] (src [heads, n, D]) or,
// with heads_inner, src[t, h, :] (src [n, heads, D]), past = at[0] (the
// positions of the pass, [past, length], live on the device so that a
// recorded pass replays at any position).
extern "C" __global__ void op_cache_rows(const op_t *__restrict__ src,
                                         op_t *__restrict__ cache, int heads,
                                         int n, int head_dim, int heads_inner,
                                         int max_len, const int *__restrict__ at) {
  const int past = at[0];
  long long total = (long long)heads * n * head_dim;
  for (long long e = op_global_id(); e < total; e += op_global_stride()) {
    int d = (int)(e % head_dim);
    long long ht = e / head_dim;
    int t = (int)(ht % n), h = (int)(ht / n);
    long long at = heads_inner ? ((long long)t * heads + h) * head_dim + d : e;
    cache[((long long)h * max_len + past + t) * head_dim + d] = src[at];
  }
}

__device__ __forceinline__ float dec_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float dec_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// op_decode_attn: block (s, g, c) attends rows c·OP_DEC_ROWS.. of kv head
// g's group (R = group·n rows: query head g·group + r/n, row r%n; q is
// [heads, n, D], so a group's rows are contiguous) to keys [s·kps,
// min(length, (s+1)·kps)) of k and v [kv_heads, max_len, D], length =
// at[1] (a split past it finds no key). Row i sees
// keys j < length − n + i + 1 with causal, j < length without. It writes,
// per split s and row r of the heads·n rows, the unnormalised output
// part_o[s, r, :] = Σ_j 2^(x_j − m)·v_j with x_j = log2(e)·scale·q·k_j, and
// part_ml[s, r] = (m, Σ_j 2^(x_j − m)); m = −inf and zeros when the split
// holds no visible key of the row.
extern "C" __global__ void op_decode_attn(const op_t *__restrict__ q, const op_t *__restrict__ k,
                   const op_t *__restrict__ v, float *__restrict__ part_o,
                   float *__restrict__ part_ml, int heads, int n, int head_dim,
                   int kv_heads, int max_len, const int *__restrict__ at, int causal,
                   float scale, int kps) {
  const int length = at[1];
  __shared__ float qs[OP_DEC_ROWS][OP_DEC_MAX_D];
  __shared__ float ks[DEC_TILE][OP_DEC_MAX_D + 1]; // padded: lanes read a column
  __shared__ float vs[DEC_TILE][OP_DEC_MAX_D];
  const int D = head_dim, s = blockIdx.x, g = blockIdx.y;
  const int group = heads / kv_heads, R = group * n;
  const int r0 = blockIdx.z * OP_DEC_ROWS, r1 = min(R, r0 + OP_DEC_ROWS);
  const int k0 = s * kps, k1 = min(length, k0 + kps);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int nt = blockDim.x;
  const long long rows = (long long)heads * n;
  const float qscale = scale * 1.4426950408889634f; // scores in log2 units: exp2
  const op_t *qg = q + (long long)g * R * D;
  for (int e = tid; e < (r1 - r0) * D; e += nt)
    qs[e / D][e % D] = op_f32(qg[(long long)r0 * D + e]) * qscale;
  const op_t *kg = k + (long long)g * max_len * D, *vg = v + (long long)g * max_len * D;
  const bool vec = D % OP_VEC == 0 && op_aligned16(kg) && op_aligned16(vg);

  float m[DEC_RPW], l[DEC_RPW], acc[DEC_RPW][DEC_DPL];
  int vis[DEC_RPW];
#pragma unroll
  for (int a = 0; a < DEC_RPW; a++) {
    m[a] = OP_NEG_INF;
    l[a] = 0.0f;
    int r = r0 + warp + a * OP_DEC_WARPS;
    vis[a] = r < r1 ? (causal ? length - n + r % n + 1 : length) : 0;
#pragma unroll
    for (int c = 0; c < DEC_DPL; c++) acc[a][c] = 0.0f;
  }
  for (int kt = k0; kt < k1; kt += DEC_TILE) {
    const int tn = min(DEC_TILE, k1 - kt);
    __syncthreads(); // the previous tile is read (and qs written, the first time)
    if (vec) {
      for (int e = tid; e < DEC_TILE * D / OP_VEC; e += nt) {
        int j = e / (D / OP_VEC), d = e % (D / OP_VEC) * OP_VEC;
        float kf[OP_VEC], vf[OP_VEC];
        if (j < tn) {
          op_load_vec(kg + (long long)(kt + j) * D + d, kf);
          op_load_vec(vg + (long long)(kt + j) * D + d, vf);
        } else {
#pragma unroll
          for (int x = 0; x < OP_VEC; x++) kf[x] = vf[x] = 0.0f;
        }
#pragma unroll
        for (int x = 0; x < OP_VEC; x++) {
          ks[j][d + x] = kf[x];
          vs[j][d + x] = vf[x];
        }
      }
    } else {
      for (int e = tid; e < DEC_TILE * D; e += nt) {
        int j = e / D, d = e % D;
        bool in = j < tn;
        ks[j][d] = in ? op_f32(kg[(long long)(kt + j) * D + d]) : 0.0f;
        vs[j][d] = in ? op_f32(vg[(long long)(kt + j) * D + d]) : 0.0f;
      }
    }
    __syncthreads();
#pragma unroll
    for (int a = 0; a < DEC_RPW; a++) {
      if (vis[a] <= kt) continue; // the row sees no key of the tile (warp-uniform)
      const float *qr = qs[warp + a * OP_DEC_WARPS];
      float x = OP_NEG_INF;
      if (lane < tn && kt + lane < vis[a]) {
        float dot = 0.0f;
        for (int d = 0; d < D; d++) dot += qr[d] * ks[lane][d];
        x = dot;
      }
      const float mn = fmaxf(m[a], dec_warp_max(x));
      const float alpha = exp2f(m[a] - mn); // 0 while m is −inf
      const float p = exp2f(x - mn);
      l[a] = l[a] * alpha + dec_warp_sum(p);
      m[a] = mn;
#pragma unroll
      for (int c = 0; c < DEC_DPL; c++) acc[a][c] *= alpha;
      for (int j = 0; j < tn; j++) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (int c = 0; c < DEC_DPL; c++)
          if (c * 32 < D) acc[a][c] += pj * vs[j][c * 32 + lane];
      }
    }
  }
#pragma unroll
  for (int a = 0; a < DEC_RPW; a++) {
    const int r = r0 + warp + a * OP_DEC_WARPS;
    if (r >= r1) continue;
    const long long row = (long long)s * rows + (long long)g * R + r;
#pragma unroll
    for (int c = 0; c < DEC_DPL; c++)
      if (c * 32 < D) part_o[row * D + c * 32 + lane] = acc[a][c];
    if (lane == 0) {
      part_ml[2 * row] = m[a];
      part_ml[2 * row + 1] = l[a];
    }
  }
}

// op_decode_combine: block r merges the splits of row r of the rows =
// heads·n rows: with M = max_s m_s and w_s = 2^(m_s − M),
// out[r, :] = Σ_s w_s·part_o[s, r, :] / Σ_s w_s·l_s. The block's threads
// read the splits' (m, l) at once and keep the weights in shared memory
// (splits ≤ OP_DEC_MAX_SPLITS); each output element then sums its splits
// in order, skipping those that hold no key.
__device__ __forceinline__ float dec_block_max(float v, float *sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads(); // sh may still be read by a previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : OP_NEG_INF;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

extern "C" __global__ void op_decode_combine(const float *__restrict__ part_o,
                                             const float *__restrict__ part_ml,
                                             op_t *__restrict__ out, int rows,
                                             int head_dim, int splits) {
  __shared__ float w[OP_DEC_MAX_SPLITS];
  __shared__ float sh[32];
  const int r = blockIdx.x;
  float m = OP_NEG_INF;
  for (int s = threadIdx.x; s < splits; s += blockDim.x) {
    w[s] = part_ml[2 * ((long long)s * rows + r)];
    m = fmaxf(m, w[s]);
  }
  const float M = dec_block_max(m, sh);
  float l = 0.0f;
  for (int s = threadIdx.x; s < splits; s += blockDim.x) {
    const float ws = w[s] == OP_NEG_INF ? 0.0f : exp2f(w[s] - M);
    l += ws * part_ml[2 * ((long long)s * rows + r) + 1];
    w[s] = ws;
  }
  const float L = op_block_sum(l, sh); // its barriers make w whole
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
#pragma unroll 8
    for (int s = 0; s < splits; s++)
      if (w[s] != 0.0f) o += w[s] * part_o[((long long)s * rows + r) * head_dim + d];
    op_put(out + (long long)r * head_dim + d, o * inv);
  }
}

// The tensor-core form of op_decode_attn (bf16 storage): the same grid,
// arguments and partials, its OP_DEC_ROWS = 16 rows one mma.sync tile.
// Each warp of a block takes every warps-th tile of DEC_MMA_TILE keys of
// the block's split: S = Q·Kᵀ on mma.sync m16n8k16 with Q and K read
// straight from memory in 16-byte loads (the head dimension permuted in
// both the same way, as op_skinny.cu does: a dot product does not care),
// the online softmax on S's fp32 accumulators, and O += P·V with P (bf16)
// taken from S's registers as the A operand and V staged through the
// warp's shared tile and read transposed by ldmatrix. The warps' partial
// results merge in shared memory in warp order (the result does not depend
// on the schedule).
#define DEC_MMA_TILE 16 // keys per warp tile: two mma.sync n-tiles of 8
#define DEC_VPAD 8      // row padding of the V tile: ldmatrix's 8 rows in distinct banks

#if OP_BF16
// dec_pack returns the bf16 pair (lo, hi) of two fp32 values, lo in the low
// half (the lower k index of an mma operand).
__device__ __forceinline__ unsigned dec_pack(float lo, float hi) {
  return (unsigned)op_bf16(lo) | ((unsigned)op_bf16(hi) << 16);
}
#endif

extern "C" __global__ void op_decode_attn_mma(const op_t *__restrict__ q, const op_t *__restrict__ k,
                   const op_t *__restrict__ v, float *__restrict__ part_o,
                   float *__restrict__ part_ml, int heads, int n, int head_dim,
                   int kv_heads, int max_len, const int *__restrict__ at, int causal,
                   float scale, int kps) {
#if OP_BF16
  __shared__ __align__(16) unsigned short vt[OP_DEC_WARPS][DEC_MMA_TILE][OP_DEC_MAX_D + DEC_VPAD];
  __shared__ float wm[OP_DEC_WARPS][16], wl[OP_DEC_WARPS][16];
  __shared__ float wo[16][OP_DEC_MAX_D];
  const int length = at[1];
  const int D = head_dim, DC = head_dim / 32, s = blockIdx.x, g = blockIdx.y;
  const int group = heads / kv_heads, R = group * n, r0 = blockIdx.z * 16;
  const int k0 = s * kps, k1 = min(length, k0 + kps);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int gq = lane >> 2, t = lane & 3;
  const long long rows = (long long)heads * n;
  const float qscale = scale * 1.4426950408889634f; // scores in log2 units: exp2
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // Rows gq and gq+8 of the tile: their Q fragments (values 8t..8t+7 of
  // each 32-column chunk) and the keys they see.
  const int ra = r0 + gq, rb = r0 + gq + 8;
  const op_t *qg = q + (long long)g * R * D;
  uint4 qa[OP_DEC_MAX_D / 32], qb[OP_DEC_MAX_D / 32];
#pragma unroll
  for (int c = 0; c < OP_DEC_MAX_D / 32; c++) {
    qa[c] = c < DC && ra < R ? *reinterpret_cast<const uint4 *>(qg + (long long)ra * D + c * 32 + t * 8) : zero;
    qb[c] = c < DC && rb < R ? *reinterpret_cast<const uint4 *>(qg + (long long)rb * D + c * 32 + t * 8) : zero;
  }
  const int visa = ra < R ? min(k1, causal ? length - n + ra % n + 1 : length) : 0;
  const int visb = rb < R ? min(k1, causal ? length - n + rb % n + 1 : length) : 0;
  const op_t *kg = k + (long long)g * max_len * D, *vg = v + (long long)g * max_len * D;

  float ma = OP_NEG_INF, mb = OP_NEG_INF, la = 0.0f, lb = 0.0f; // la, lb: this lane's part of the sums
  float acc[OP_DEC_MAX_D / 8][4];
#pragma unroll
  for (int j = 0; j < OP_DEC_MAX_D / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  unsigned short(*vw)[OP_DEC_MAX_D + DEC_VPAD] = vt[warp];
  for (int kt = k0 + warp * DEC_MMA_TILE; kt < k1; kt += warps * DEC_MMA_TILE) {
    // The tile's V rows into the warp's shared tile (zeros past k1).
    for (int e = lane; e < DEC_MMA_TILE * D / 8; e += 32) {
      const int j = e / (D / 8), d = e % (D / 8) * 8;
      *reinterpret_cast<uint4 *>(&vw[j][d]) = kt + j < k1 ? *reinterpret_cast<const uint4 *>(vg + (long long)(kt + j) * D + d) : zero;
    }
    // S = Q·Kᵀ: n-tile h holds keys kt + 8h + (0..7), key kt + 8h + gq
    // loaded by this lane.
    float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int key = kt + 8 * h + gq;
      const op_t *kr = kg + (long long)key * D + t * 8;
#pragma unroll
      for (int c = 0; c < OP_DEC_MAX_D / 32; c++) {
        if (c >= DC) break;
        const uint4 kv = key < k1 ? *reinterpret_cast<const uint4 *>(kr + c * 32) : zero;
        op_mma_bf16(sc[h], qa[c].x, qb[c].x, qa[c].y, qb[c].y, kv.x, kv.y);
        op_mma_bf16(sc[h], qa[c].z, qb[c].z, qa[c].w, qb[c].w, kv.z, kv.w);
      }
    }
    // The online softmax: sc[h][i] is row gq (i < 2) or gq+8 of key
    // kt + 8h + 2t + i%2.
    float xa = OP_NEG_INF, xb = OP_NEG_INF;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int key = kt + 8 * h + 2 * t + (i & 1);
        const float x = key < (i < 2 ? visa : visb) ? sc[h][i] * qscale : OP_NEG_INF;
        sc[h][i] = x;
        if (i < 2) xa = fmaxf(xa, x);
        else xb = fmaxf(xb, x);
      }
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
      xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, o));
      xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, o));
    }
    const float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);
    const float ba = na == OP_NEG_INF ? 0.0f : na, bb = nb == OP_NEG_INF ? 0.0f : nb; // no key yet: all p are 0
    const float fa = exp2f(ma - ba), fb = exp2f(mb - bb);
    ma = na;
    mb = nb;
    la *= fa;
    lb *= fb;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const float p = exp2f(sc[h][i] - (i < 2 ? ba : bb));
        sc[h][i] = p;
        if (i < 2) la += p;
        else lb += p;
      }
#pragma unroll
    for (int j = 0; j < OP_DEC_MAX_D / 8; j++) {
      acc[j][0] *= fa;
      acc[j][1] *= fa;
      acc[j][2] *= fb;
      acc[j][3] *= fb;
    }
    // O += P·V: P's A fragment from S's accumulators (keys 2t, 2t+1 of
    // n-tile 0, then of n-tile 1), V's B fragments by ldmatrix.trans of the
    // 8×8 blocks (keys 0-7 | 8-15) × (d0 | d0+8).
    const unsigned p0 = dec_pack(sc[0][0], sc[0][1]), p1 = dec_pack(sc[0][2], sc[0][3]);
    const unsigned p2 = dec_pack(sc[1][0], sc[1][1]), p3 = dec_pack(sc[1][2], sc[1][3]);
    __syncwarp();
    const int mi = lane >> 3;
#pragma unroll
    for (int j = 0; j < OP_DEC_MAX_D / 16; j++) {
      if (j >= D / 16) break;
      const unsigned addr = (unsigned)__cvta_generic_to_shared(&vw[(mi & 1) * 8 + (lane & 7)][j * 16 + (mi >> 1) * 8]);
      unsigned b0, b1, b2, b3;
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                   : "r"(addr));
      op_mma_bf16(acc[2 * j], p0, p1, p2, p3, b0, b1);
      op_mma_bf16(acc[2 * j + 1], p0, p1, p2, p3, b2, b3);
    }
    __syncwarp(); // the tile is read before the next one is stored
  }
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    la += __shfl_xor_sync(0xffffffffu, la, o);
    lb += __shfl_xor_sync(0xffffffffu, lb, o);
  }
  // Merge the warps: each scales its part to the block's row maxima and
  // adds it to wo in warp order.
  if (t == 0) {
    wm[warp][gq] = ma;
    wm[warp][gq + 8] = mb;
    wl[warp][gq] = la;
    wl[warp][gq + 8] = lb;
  }
  __syncthreads();
  float Ma = OP_NEG_INF, Mb = OP_NEG_INF;
  for (int w = 0; w < warps; w++) {
    Ma = fmaxf(Ma, wm[w][gq]);
    Mb = fmaxf(Mb, wm[w][gq + 8]);
  }
  const float fa = ma == OP_NEG_INF ? 0.0f : exp2f(ma - Ma), fb = mb == OP_NEG_INF ? 0.0f : exp2f(mb - Mb);
  for (int w = 0; w < warps; w++) {
    if (w == warp) {
#pragma unroll
      for (int j = 0; j < OP_DEC_MAX_D / 8; j++) {
        if (j >= D / 8) break;
        const int d = j * 8 + 2 * t;
        float *oa = &wo[gq][d], *ob = &wo[gq + 8][d];
        if (w == 0) {
          oa[0] = acc[j][0] * fa, oa[1] = acc[j][1] * fa, ob[0] = acc[j][2] * fb, ob[1] = acc[j][3] * fb;
        } else {
          oa[0] += acc[j][0] * fa, oa[1] += acc[j][1] * fa, ob[0] += acc[j][2] * fb, ob[1] += acc[j][3] * fb;
        }
      }
    }
    __syncthreads();
  }
  const int nr = min(16, R - r0);
  for (int e = threadIdx.x; e < nr * D; e += blockDim.x) {
    const int i = e / D, d = e % D;
    part_o[((long long)s * rows + (long long)g * R + r0 + i) * D + d] = wo[i][d];
  }
  if ((int)threadIdx.x < nr) {
    const int i = threadIdx.x;
    float M = OP_NEG_INF, L = 0.0f;
    for (int w = 0; w < warps; w++) M = fmaxf(M, wm[w][i]);
    for (int w = 0; w < warps; w++)
      if (wm[w][i] != OP_NEG_INF) L += exp2f(wm[w][i] - M) * wl[w][i];
    const long long row = (long long)s * rows + (long long)g * R + r0 + i;
    part_ml[2 * row] = M;
    part_ml[2 * row + 1] = L;
  }
#endif
}
