// op_norm_rope.cu: QK-norm, RoPE and the move to attention's layout in one
// pass, and its gradients (tensor.Backend's NormRoPE and NormRoPEBackward).
// x and dx are [batch, length, heads, 2·half] storage elements whose rows
// (b, l) lie x_stride elements apart (heads·2·half when dense, more when x
// is a block of a product's columns), y and dy [batch, heads, length,
// 2·half] (dense); w [2·half] is storage (null: no norm);
// rstd [batch·length·heads], cos and sin [batch·length, half] and the dw
// partial sums are fp32. Head row i = (b·length + l)·heads + h (fewer than
// 2³¹) is x's row order; its rotary row is r = b·length + l.
//
// The row kernels give each head row lanes threads (a power of two ≤ 32
// dividing the block, chosen by the launcher), blockDim/lanes rows per
// block, the grid striding over rows; a row's sum is an xor butterfly of
// shuffles within its lanes (op_group_sum). A lane takes the pairs
// (k, k + half) of vectors k = lane, lane + lanes, … when half is a whole
// number of vectors, x_stride too and every pointer is aligned, else of
// single elements.
//
// Block shapes from the Go launcher (tensor/tensorcuda compileOptions); a
// standalone build: nvcc -arch=sm_90 -Xptxas -v -c -DOP_BF16=1 -DOP_ROW_VECS=8
// -DOP_DW_THREADS=256 kernels/op_norm_rope.cu
#include "op_common.cuh"

// OP_DW_THREADS: the most threads per block of op_norm_rope_bwd_dw's vector
// path, whose shared sums are sized for it (the launcher's threads).
#ifndef OP_DW_THREADS
#error "OP_DW_THREADS is set by the Go launcher (-DOP_DW_THREADS=256)"
#endif

// op_head_map locates head rows (fewer than 2³¹: the launcher checks) with
// op_udiv's divisions, built once per thread.
struct op_head_map {
  op_udiv by_heads, by_length;
  unsigned length, heads, dim;
  __device__ op_head_map(int l, int h, int d)
      : by_heads((unsigned)h), by_length((unsigned)l), length((unsigned)l), heads((unsigned)h), dim((unsigned)d) {}
  // out returns the offset of head row i in the [batch, heads, length, dim]
  // layout and sets *r to its rotary row.
  __device__ __forceinline__ long long out(long long i, long long *r) const {
    unsigned rr = by_heads.div((unsigned)i), h = (unsigned)i - rr * heads;
    unsigned b = by_length.div(rr), l = rr - b * length;
    *r = rr;
    return (((long long)b * heads + h) * length + l) * dim;
  }
  // in returns the offset of head row i in x (and dx), rows stride apart.
  __device__ __forceinline__ long long in(long long i, long long stride) const {
    unsigned rr = by_heads.div((unsigned)i), h = (unsigned)i - rr * heads;
    return (long long)rr * stride + (long long)h * dim;
  }
};

// op_norm_rope_vec reports whether the row kernels take 16-byte vectors.
__device__ __forceinline__ bool op_norm_rope_vec(int half, int stride, const void *x, const void *w, const void *y,
                                                 const void *cos, const void *sin) {
  return half % OP_VEC == 0 && stride % OP_VEC == 0 && op_aligned16(x) && (!w || op_aligned16(w)) && op_aligned16(y) &&
         op_aligned16(cos) && op_aligned16(sin);
}

// op_norm_rope_fwd: for head row i, rstd[i] = 1/sqrt(mean(x[i,:]²) + eps)
// and, with z = x[i,:]·rstd·w (x[i,:] without w: rstd not written),
// a = z[k], b = z[k+half], c = cos[r,k], s = sin[r,k]:
// y[k] = a·c − b·s, y[k+half] = b·c + a·s at y's row of head row i.
extern "C" __global__ void op_norm_rope_fwd(const op_t *__restrict__ x, const op_t *__restrict__ w,
                                            const float *__restrict__ cos, const float *__restrict__ sin,
                                            op_t *__restrict__ y, float *__restrict__ rstd, int batch,
                                            int length, int heads, int half, int x_stride, float eps, int lanes) {
  int lane = threadIdx.x & (lanes - 1), per = blockDim.x / lanes, dim = 2 * half;
  long long rows = (long long)batch * length * heads;
  op_head_map map(length, heads, dim);
  int nv = op_norm_rope_vec(half, x_stride, x, w, y, cos, sin) ? half / OP_VEC : 0;
  for (long long r0 = (long long)blockIdx.x * per; r0 < rows; r0 += (long long)gridDim.x * per) {
    long long i = r0 + threadIdx.x / lanes;
    bool live = i < rows; // the whole warp stays for the shuffles
    const op_t *xr = x + (live ? map.in(i, x_stride) : 0);
    float rs = 1.0f;
    if (w) {
      float ss = 0.0f;
      if (live) {
        for (int k = lane; k < nv; k += lanes) {
          float a[OP_VEC], b[OP_VEC];
          op_load_vec(xr + k * OP_VEC, a);
          op_load_vec(xr + half + k * OP_VEC, b);
#pragma unroll
          for (int e = 0; e < OP_VEC; e++) ss += a[e] * a[e] + b[e] * b[e];
        }
        for (int c = nv * OP_VEC + lane; c < half; c += lanes) {
          float a = op_f32(xr[c]), b = op_f32(xr[c + half]);
          ss += a * a + b * b;
        }
      }
      ss = op_group_sum(ss, lanes);
      rs = 1.0f / sqrtf(ss / (float)dim + eps);
      if (live && lane == 0) rstd[i] = rs;
    }
    if (!live) continue;
    long long r;
    op_t *yr = y + map.out(i, &r);
    const float *cr = cos + r * half, *sr = sin + r * half;
    for (int k = lane; k < nv; k += lanes) {
      int c0 = k * OP_VEC;
      float a[OP_VEC], b[OP_VEC], c[OP_VEC], s[OP_VEC], wa[OP_VEC], wb[OP_VEC];
      op_load_vec(xr + c0, a);
      op_load_vec(xr + half + c0, b);
      op_load_f32_vec(cr + c0, c);
      op_load_f32_vec(sr + c0, s);
      if (w) {
        op_load_vec(w + c0, wa);
        op_load_vec(w + half + c0, wb);
      }
#pragma unroll
      for (int e = 0; e < OP_VEC; e++) {
        float za = w ? a[e] * rs * wa[e] : a[e], zb = w ? b[e] * rs * wb[e] : b[e];
        a[e] = za * c[e] - zb * s[e];
        b[e] = zb * c[e] + za * s[e];
      }
      op_store_vec(yr + c0, a);
      op_store_vec(yr + half + c0, b);
    }
    for (int k = nv * OP_VEC + lane; k < half; k += lanes) {
      float za = op_f32(xr[k]), zb = op_f32(xr[k + half]), c = cr[k], s = sr[k];
      if (w) {
        za *= rs * op_f32(w[k]);
        zb *= rs * op_f32(w[k + half]);
      }
      op_put(yr + k, za * c - zb * s);
      op_put(yr + k + half, zb * c + za * s);
    }
  }
}

// op_norm_rope_grad loads OP_VEC pairs of dy at row dyr, columns c0 and
// c0 + half, and rotates them by −angle into g: ga = a·c + b·s,
// gb = b·c − a·s (RoPE's gradient).
__device__ __forceinline__ void op_norm_rope_grad(const op_t *dyr, const float *cr, const float *sr, int c0,
                                                  int half, float *ga, float *gb) {
  float a[OP_VEC], b[OP_VEC], c[OP_VEC], s[OP_VEC];
  op_load_vec(dyr + c0, a);
  op_load_vec(dyr + half + c0, b);
  op_load_f32_vec(cr + c0, c);
  op_load_f32_vec(sr + c0, s);
#pragma unroll
  for (int e = 0; e < OP_VEC; e++) {
    ga[e] = a[e] * c[e] + b[e] * s[e];
    gb[e] = b[e] * c[e] - a[e] * s[e];
  }
}

// op_norm_rope_bwd_dx: for head row i, with g the rotation by −angle of
// its row of dy and x̂ = x[i,:]·rstd[i]: dx[i,:] = rstd·(g·w − x̂·mean(g·w·x̂)),
// or dx[i,:] = g without w (x and rstd are not read then); dx += that when
// accumulate is non-zero (dx is not read without it).
extern "C" __global__ void op_norm_rope_bwd_dx(const op_t *__restrict__ x, const op_t *__restrict__ w,
                                               const float *__restrict__ rstd, const float *__restrict__ cos,
                                               const float *__restrict__ sin, const op_t *__restrict__ dy,
                                               op_t *__restrict__ dx, int batch, int length, int heads,
                                               int half, int x_stride, int lanes, int accumulate) {
  int lane = threadIdx.x & (lanes - 1), per = blockDim.x / lanes, dim = 2 * half;
  long long rows = (long long)batch * length * heads;
  op_head_map map(length, heads, dim);
  bool vec = op_norm_rope_vec(half, x_stride, w ? x : dx, w, dy, cos, sin) && op_aligned16(dx);
  int nv = vec ? half / OP_VEC : 0;
  for (long long r0 = (long long)blockIdx.x * per; r0 < rows; r0 += (long long)gridDim.x * per) {
    long long i = r0 + threadIdx.x / lanes;
    bool live = i < rows; // the whole warp stays for the shuffles
    long long r = 0;
    const op_t *dyr = dy + (live ? map.out(i, &r) : 0);
    const float *cr = cos + r * half, *sr = sin + r * half;
    long long xo = live ? map.in(i, x_stride) : 0;
    const op_t *xr = w ? x + xo : nullptr;
    op_t *dxr = dx + xo;
    float rs = 0.0f, m = 0.0f;
    if (w) {
      float dot = 0.0f; // Σ g·w·x, times rs below
      if (live) {
        for (int k = lane; k < nv; k += lanes) {
          int c0 = k * OP_VEC;
          float ga[OP_VEC], gb[OP_VEC], xa[OP_VEC], xb[OP_VEC], wa[OP_VEC], wb[OP_VEC];
          op_norm_rope_grad(dyr, cr, sr, c0, half, ga, gb);
          op_load_vec(xr + c0, xa);
          op_load_vec(xr + half + c0, xb);
          op_load_vec(w + c0, wa);
          op_load_vec(w + half + c0, wb);
#pragma unroll
          for (int e = 0; e < OP_VEC; e++) dot += ga[e] * wa[e] * xa[e] + gb[e] * wb[e] * xb[e];
        }
        for (int k = nv * OP_VEC + lane; k < half; k += lanes) {
          float a = op_f32(dyr[k]), b = op_f32(dyr[k + half]), c = cr[k], s = sr[k];
          dot += (a * c + b * s) * op_f32(w[k]) * op_f32(xr[k]) +
                 (b * c - a * s) * op_f32(w[k + half]) * op_f32(xr[k + half]);
        }
      }
      dot = op_group_sum(dot, lanes);
      if (live) {
        rs = rstd[i];
        m = dot * rs / (float)dim;
      }
    }
    if (!live) continue;
    for (int k = lane; k < nv; k += lanes) {
      int c0 = k * OP_VEC;
      float ga[OP_VEC], gb[OP_VEC], oa[OP_VEC] = {}, ob[OP_VEC] = {};
      op_norm_rope_grad(dyr, cr, sr, c0, half, ga, gb);
      if (accumulate) {
        op_load_vec(dxr + c0, oa);
        op_load_vec(dxr + half + c0, ob);
      }
      if (w) {
        float xa[OP_VEC], xb[OP_VEC], wa[OP_VEC], wb[OP_VEC];
        op_load_vec(xr + c0, xa);
        op_load_vec(xr + half + c0, xb);
        op_load_vec(w + c0, wa);
        op_load_vec(w + half + c0, wb);
#pragma unroll
        for (int e = 0; e < OP_VEC; e++) {
          oa[e] += rs * (ga[e] * wa[e] - xa[e] * rs * m);
          ob[e] += rs * (gb[e] * wb[e] - xb[e] * rs * m);
        }
      } else {
#pragma unroll
        for (int e = 0; e < OP_VEC; e++) oa[e] += ga[e], ob[e] += gb[e];
      }
      op_store_vec(dxr + c0, oa);
      op_store_vec(dxr + half + c0, ob);
    }
    for (int k = nv * OP_VEC + lane; k < half; k += lanes) {
      float a = op_f32(dyr[k]), b = op_f32(dyr[k + half]), c = cr[k], s = sr[k];
      float ga = a * c + b * s, gb = b * c - a * s;
      if (w) {
        ga = rs * (ga * op_f32(w[k]) - op_f32(xr[k]) * rs * m);
        gb = rs * (gb * op_f32(w[k + half]) - op_f32(xr[k + half]) * rs * m);
      }
      op_put(dxr + k, (accumulate ? op_f32(dxr[k]) : 0.0f) + ga);
      op_put(dxr + k + half, (accumulate ? op_f32(dxr[k + half]) : 0.0f) + gb);
    }
  }
}

// op_norm_rope_bwd_dw: block (bx, k) sums g·x·rstd over the head rows
// [k·rows_per_chunk, (k+1)·rows_per_chunk) ∩ [0, rows) (g: dy's row rotated
// by −angle) and writes partial[k·2·half + c] (overwriting); op_colsum adds
// the chunks. With vec (the launcher's choice: 16-byte vectors fit half, x's
// stride and every pointer, one block of at most OP_DW_THREADS threads spans
// the 2·half columns) the block's threads form groups of half/OP_VEC, a
// group takes every groups-th row of the chunk and a thread OP_VEC pairs of
// columns of it, with vector loads; the groups' sums are added through
// shared memory in group order. Without, a thread sums one column
// c = bx·blockDim + tid over the chunk's rows.
extern "C" __global__ void op_norm_rope_bwd_dw(const op_t *__restrict__ x, const float *__restrict__ rstd,
                                               const float *__restrict__ cos, const float *__restrict__ sin,
                                               const op_t *__restrict__ dy, float *__restrict__ partial,
                                               int batch, int length, int heads, int half, int x_stride,
                                               int rows_per_chunk, int vec) {
  int dim = 2 * half;
  int rows = batch * length * heads; // fewer than 2³¹ (the launcher checks)
  int r0 = blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  op_head_map map(length, heads, dim);
  if (vec) {
    __shared__ float sums[OP_DW_THREADS * 2 * OP_VEC]; // [groups][dim]
    int per_row = half / OP_VEC, groups = blockDim.x / per_row;
    int g = threadIdx.x / per_row, c0 = (threadIdx.x % per_row) * OP_VEC;
    if (g < groups) {
      float sa[OP_VEC] = {}, sb[OP_VEC] = {};
      for (int i = r0 + g; i < r1; i += groups) {
        long long r;
        const op_t *dyr = dy + map.out(i, &r);
        const op_t *xr = x + map.in(i, x_stride);
        float ga[OP_VEC], gb[OP_VEC], xa[OP_VEC], xb[OP_VEC];
        op_norm_rope_grad(dyr, cos + r * half, sin + r * half, c0, half, ga, gb);
        op_load_vec(xr + c0, xa);
        op_load_vec(xr + half + c0, xb);
        float rs = rstd[i];
#pragma unroll
        for (int e = 0; e < OP_VEC; e++) {
          sa[e] += ga[e] * xa[e] * rs;
          sb[e] += gb[e] * xb[e] * rs;
        }
      }
#pragma unroll
      for (int e = 0; e < OP_VEC; e++) {
        sums[g * dim + c0 + e] = sa[e];
        sums[g * dim + half + c0 + e] = sb[e];
      }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
      float acc = 0.0f;
      for (int q = 0; q < groups; q++) acc += sums[q * dim + c];
      partial[(long long)blockIdx.y * dim + c] = acc;
    }
    return;
  }
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  bool lo = c < half;
  int p = lo ? c : c - half; // the pair's index
  float acc = 0.0f;
  for (int i = r0; i < r1; i++) {
    long long r;
    const op_t *dyr = dy + map.out(i, &r);
    float a = op_f32(dyr[p]), b = op_f32(dyr[p + half]), cs = cos[r * half + p], sn = sin[r * half + p];
    float g = lo ? a * cs + b * sn : b * cs - a * sn;
    acc += g * op_f32(x[map.in(i, x_stride) + c]) * rstd[i];
  }
  partial[(long long)blockIdx.y * dim + c] = acc;
}
