// op_decode.cu: decoding with a KV cache (tensor.Backend's CacheRows and
// DecodeAttention): rows appended to a cache [heads, max_len, head_dim],
// and the attention of a few query rows (1..16 per head) over a long cache,
// split over the cache across thread blocks (flash-decoding): each block
// attends its group's rows to one range of keys and writes an unnormalised
// partial output with its running max and sum, and op_decode_combine merges
// the splits. Scores, softmax and sums are fp32 whatever the storage.
//
// Block shapes from the Go launcher (tensor/tensorcuda compileOptions); a
// standalone build: nvcc -arch=sm_90 -Xptxas -v -c -DOP_BF16=1
// -DOP_DEC_ROWS=16 -DOP_DEC_WARPS=4 -DOP_DEC_MAX_D=128 kernels/op_decode.cu
#include "op_common.cuh"

// OP_DEC_ROWS: query rows per block (a kv head's group rows, in chunks);
// OP_DEC_WARPS: warps per block, each taking every OP_DEC_WARPS-th row;
// OP_DEC_MAX_D: the largest head dimension (a multiple of 32).
#ifndef OP_DEC_ROWS
#error "OP_DEC_ROWS is set by the Go launcher (-DOP_DEC_ROWS=16)"
#endif
#ifndef OP_DEC_WARPS
#error "OP_DEC_WARPS is set by the Go launcher (-DOP_DEC_WARPS=4)"
#endif
#ifndef OP_DEC_MAX_D
#error "OP_DEC_MAX_D is set by the Go launcher (-DOP_DEC_MAX_D=128)"
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
// out[r, :] = Σ_s w_s·part_o[s, r, :] / Σ_s w_s·l_s.
extern "C" __global__ void op_decode_combine(const float *__restrict__ part_o,
                                             const float *__restrict__ part_ml,
                                             op_t *__restrict__ out, int rows,
                                             int head_dim, int splits) {
  const int r = blockIdx.x;
  float M = OP_NEG_INF;
  for (int s = 0; s < splits; s++) M = fmaxf(M, part_ml[2 * ((long long)s * rows + r)]);
  float L = 0.0f;
  for (int s = 0; s < splits; s++) {
    long long i = (long long)s * rows + r;
    if (part_ml[2 * i] != OP_NEG_INF) L += exp2f(part_ml[2 * i] - M) * part_ml[2 * i + 1];
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < splits; s++) {
      long long i = (long long)s * rows + r;
      if (part_ml[2 * i] != OP_NEG_INF) o += exp2f(part_ml[2 * i] - M) * part_o[i * head_dim + d];
    }
    op_put(out + (long long)r * head_dim + d, o * inv);
  }
}
