// op_rmsnorm.cu: RMSNorm forward and backward (tensor.Backend's RMSNorm and
// RMSNormBackward). x, w, y, dy, dx are storage elements; rstd, the dw
// partial sums and dw are fp32. The weight gradient is deterministic: each
// block of op_rmsnorm_bwd_dw, or of op_rmsnorm_bwd (dx and dw in one pass
// over x and dy, for rows of whole vectors), sums a fixed chunk of rows per
// column into partial[chunk, dim] in a fixed order, and op_colsum
// (op_rows.cu) adds the chunks, in order, into dw.
//
// Block shapes from the Go launcher (tensor/tensorcuda compileOptions); a
// standalone build: nvcc -arch=sm_90 -Xptxas -v -c -DOP_BF16=1 -DOP_ROW_VECS=8
// -DOP_DW_THREADS=256 -DOP_NORM_VECS=2 kernels/op_rmsnorm.cu
#include "op_common.cuh"

// OP_DW_THREADS: the most threads per block of op_rmsnorm_bwd_dw's vector
// path, whose shared sums are sized for it (the launcher's threads).
#ifndef OP_DW_THREADS
#error "OP_DW_THREADS is set by the Go launcher (-DOP_DW_THREADS=256)"
#endif
// OP_NORM_VECS: the most 16-byte vectors of a row per thread of
// op_rmsnorm_bwd (the launcher's normVecs).
#ifndef OP_NORM_VECS
#error "OP_NORM_VECS is set by the Go launcher (-DOP_NORM_VECS=2)"
#endif

// op_row_vecs returns the 16-byte vectors per row of dim columns when every
// row of the given pointers starts aligned, else 0 (scalar loops only).
__device__ __forceinline__ int op_row_vecs(int dim, bool aligned) {
  return aligned && dim % OP_VEC == 0 ? dim / OP_VEC : 0;
}

// The row phases that the one-block-per-row kernels and the _small kernels
// share: a thread t of a row's step threads (a block's threads, or a row's
// lanes) takes the vectors k = t, t + step, … < nv in order, then the
// columns nv·OP_VEC + t, + step, … < dim.

// op_row_sumsq returns this thread's part of Σ x² over row xr.
__device__ __forceinline__ float op_row_sumsq(const op_t *xr, int nv, int dim, int t, int step) {
  float ss = 0.0f;
  for (int k = t; k < nv; k += step) {
    float xs[OP_VEC];
    op_load_vec(xr + k * OP_VEC, xs);
#pragma unroll
    for (int e = 0; e < OP_VEC; e++) ss += xs[e] * xs[e];
  }
  for (int c = nv * OP_VEC + t; c < dim; c += step) {
    float v = op_f32(xr[c]);
    ss += v * v;
  }
  return ss;
}

// op_row_norm writes this thread's part of yr = xr·rs·w.
__device__ __forceinline__ void op_row_norm(const op_t *xr, const op_t *w, op_t *yr, float rs, int nv, int dim, int t,
                                            int step) {
  for (int k = t; k < nv; k += step) {
    float xs[OP_VEC], ws[OP_VEC];
    op_load_vec(xr + k * OP_VEC, xs);
    op_load_vec(w + k * OP_VEC, ws);
#pragma unroll
    for (int e = 0; e < OP_VEC; e++) xs[e] = xs[e] * rs * ws[e];
    op_store_vec(yr + k * OP_VEC, xs);
  }
  for (int c = nv * OP_VEC + t; c < dim; c += step)
    op_put(yr + c, op_f32(xr[c]) * rs * op_f32(w[c]));
}

// op_row_gdot returns this thread's part of Σ dy·w·x over a row.
__device__ __forceinline__ float op_row_gdot(const op_t *xr, const op_t *w, const op_t *dyr, int nv, int dim, int t,
                                             int step) {
  float dot = 0.0f;
  for (int k = t; k < nv; k += step) {
    float xs[OP_VEC], ws[OP_VEC], ds[OP_VEC];
    op_load_vec(xr + k * OP_VEC, xs);
    op_load_vec(w + k * OP_VEC, ws);
    op_load_vec(dyr + k * OP_VEC, ds);
#pragma unroll
    for (int e = 0; e < OP_VEC; e++) dot += ds[e] * ws[e] * xs[e];
  }
  for (int c = nv * OP_VEC + t; c < dim; c += step)
    dot += op_f32(dyr[c]) * op_f32(w[c]) * op_f32(xr[c]);
  return dot;
}

// op_row_dx writes (or with accumulate adds) this thread's part of
// dx = rs·(dy·w − x·rs·m).
__device__ __forceinline__ void op_row_dx(const op_t *xr, const op_t *w, const op_t *dyr, op_t *dxr, float rs, float m,
                                          int accumulate, int nv, int dim, int t, int step) {
  for (int k = t; k < nv; k += step) {
    float xs[OP_VEC], ws[OP_VEC], ds[OP_VEC], os[OP_VEC] = {};
    op_load_vec(xr + k * OP_VEC, xs);
    op_load_vec(w + k * OP_VEC, ws);
    op_load_vec(dyr + k * OP_VEC, ds);
    if (accumulate) op_load_vec(dxr + k * OP_VEC, os);
#pragma unroll
    for (int e = 0; e < OP_VEC; e++) os[e] += rs * (ds[e] * ws[e] - xs[e] * rs * m);
    op_store_vec(dxr + k * OP_VEC, os);
  }
  for (int c = nv * OP_VEC + t; c < dim; c += step) {
    float g = op_f32(dyr[c]) * op_f32(w[c]);
    float v = op_f32(xr[c]);
    op_put(dxr + c, (accumulate ? op_f32(dxr[c]) : 0.0f) + rs * (g - v * rs * m));
  }
}

// op_row_rmsnorm_held is RMSNorm of a row that fits (op_row_fits(nv)):
// it holds the thread's vectors t + j·blockDim of x's row xr in v, writes
// the row's rstd (thread 0), and leaves y = x·rstd·w in v as storage holds
// it. op_rmsnorm_fwd and op_rmsnorm_e4m3 share it: the same sums.
__device__ __forceinline__ void op_row_rmsnorm_held(const op_t *xr, const op_t *w, int nv, int dim, float eps,
                                                    op_vec16 *v, float *rstd, float *sh) {
  op_vec16 wv[OP_ROW_VECS];
  op_row_load(xr, nv, v);
  op_row_load(w, nv, wv);
  float ss = 0.0f; // op_row_sumsq's order: vectors t, t + blockDim, …
#pragma unroll
  for (int j = 0; j < OP_ROW_VECS; j++)
    if ((int)threadIdx.x + j * (int)blockDim.x < nv)
#pragma unroll
      for (int e = 0; e < OP_VEC; e++) ss += op_f32(v[j].e[e]) * op_f32(v[j].e[e]);
  float rs = 1.0f / sqrtf(op_block_sum(ss, sh) / (float)dim + eps);
  if (threadIdx.x == 0) *rstd = rs;
#pragma unroll
  for (int j = 0; j < OP_ROW_VECS; j++)
    if ((int)threadIdx.x + j * (int)blockDim.x < nv)
#pragma unroll
      for (int e = 0; e < OP_VEC; e++) op_put(&v[j].e[e], op_f32(v[j].e[e]) * rs * op_f32(wv[j].e[e]));
}

// op_rmsnorm_fwd: one block per row r < rows of dim columns (large dims):
// rstd[r] = 1/sqrt(mean(x²) + eps), y = x·rstd·w. A row that fits the
// block's registers (op_row_fits) is read once and held; a larger or
// unaligned one is read twice (the second time from cache).
extern "C" __global__ void op_rmsnorm_fwd(const op_t *__restrict__ x,
                                          const op_t *__restrict__ w,
                                          op_t *__restrict__ y,
                                          float *__restrict__ rstd, int rows,
                                          int dim, float eps) {
  __shared__ float sh[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const op_t *xr = x + (long long)r * dim;
  op_t *yr = y + (long long)r * dim;
  int nv = op_row_vecs(dim, op_aligned16(x) && op_aligned16(w) && op_aligned16(y));
  if (op_row_fits(nv)) {
    op_vec16 v[OP_ROW_VECS];
    op_row_rmsnorm_held(xr, w, nv, dim, eps, v, rstd + r, sh);
    op_row_store(yr, nv, v);
    return;
  }
  float ss = op_block_sum(op_row_sumsq(xr, nv, dim, threadIdx.x, blockDim.x), sh);
  float rs = 1.0f / sqrtf(ss / (float)dim + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  op_row_norm(xr, w, yr, rs, nv, dim, threadIdx.x, blockDim.x);
}

// op_rmsnorm_e4m3: op_rmsnorm_fwd whose y goes straight to E4M3, a row
// at a time (one block per row): y = x·rstd·w as op_rmsnorm_fwd stores it,
// scales[r] = max |y| / 448 and codes = e4m3(y / scales[r]), as
// op_quant_rows_e4m3 of that y, bit for bit when op_rmsnorm_fwd runs
// blocks of the same size (the same sums: the launcher's rowThreads) on
// aligned rows. y is never stored: a row that fits the block's registers
// (op_row_fits) is read once and held; a larger or unaligned one makes y
// twice (for the row's largest magnitude, then its codes), reading x and w
// again from cache.
extern "C" __global__ void op_rmsnorm_e4m3(const op_t *__restrict__ x,
                                           const op_t *__restrict__ w,
                                           unsigned char *__restrict__ codes,
                                           float *__restrict__ scales,
                                           float *__restrict__ rstd, int rows,
                                           int dim, float eps) {
  __shared__ float sh[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const op_t *xr = x + (long long)r * dim;
  unsigned char *q = codes + (long long)r * dim;
  int nv = op_row_vecs(dim, op_aligned16(x) && op_aligned16(w) && op_aligned16(codes));
  if (op_row_fits(nv)) {
    op_vec16 v[OP_ROW_VECS];
    op_row_rmsnorm_held(xr, w, nv, dim, eps, v, rstd + r, sh);
    op_row_e4m3(v, nv, q, scales + r, sh);
    return;
  }
  float ss = op_block_sum(op_row_sumsq(xr, nv, dim, threadIdx.x, blockDim.x), sh);
  float rs = 1.0f / sqrtf(ss / (float)dim + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  float a = 0.0f;
  for (int k = threadIdx.x; k < nv; k += blockDim.x) {
    float xs[OP_VEC], ws[OP_VEC];
    op_load_vec(xr + k * OP_VEC, xs);
    op_load_vec(w + k * OP_VEC, ws);
#pragma unroll
    for (int e = 0; e < OP_VEC; e++) a = fmaxf(a, fabsf(op_stored(xs[e] * rs * ws[e])));
  }
  for (int c = nv * OP_VEC + threadIdx.x; c < dim; c += blockDim.x)
    a = fmaxf(a, fabsf(op_stored(op_f32(xr[c]) * rs * op_f32(w[c]))));
  float sc = op_e4m3_scale(op_block_max(a, sh));
  if (threadIdx.x == 0) scales[r] = sc;
  for (int k = threadIdx.x; k < nv; k += blockDim.x) {
    float xs[OP_VEC], ws[OP_VEC];
    op_load_vec(xr + k * OP_VEC, xs);
    op_load_vec(w + k * OP_VEC, ws);
    unsigned char out[OP_VEC];
#pragma unroll
    for (int e = 0; e < OP_VEC; e++) out[e] = op_e4m3(op_stored(xs[e] * rs * ws[e]) / sc);
    op_store_codes(q + k * OP_VEC, out);
  }
  for (int c = nv * OP_VEC + threadIdx.x; c < dim; c += blockDim.x)
    q[c] = op_e4m3(op_stored(op_f32(xr[c]) * rs * op_f32(w[c])) / sc);
}

// op_rmsnorm_bwd_dx: one block per row; with x̂ = x·rstd and g = dy·w,
// dx = rstd·(g − x̂·mean(g·x̂)), or dx += that when accumulate is non-zero
// (dx is not read without it).
extern "C" __global__ void op_rmsnorm_bwd_dx(const op_t *__restrict__ x,
                                             const op_t *__restrict__ w,
                                             const float *__restrict__ rstd,
                                             const op_t *__restrict__ dy,
                                             op_t *__restrict__ dx, int rows,
                                             int dim, int accumulate) {
  __shared__ float sh[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  long long base = (long long)r * dim;
  const op_t *xr = x + base, *dyr = dy + base;
  op_t *dxr = dx + base;
  int nv = op_row_vecs(dim, op_aligned16(x) && op_aligned16(w) && op_aligned16(dy) && op_aligned16(dx));
  float rs = rstd[r];
  float dot = op_block_sum(op_row_gdot(xr, w, dyr, nv, dim, threadIdx.x, blockDim.x), sh); // Σ g·x, times rs below
  float m = dot * rs / (float)dim;
  op_row_dx(xr, w, dyr, dxr, rs, m, accumulate, nv, dim, threadIdx.x, blockDim.x);
}

// Small dims (the per-head QK norm: dim 128) run the _small kernels: lanes
// threads per row (a power of two ≤ 32 dividing the block, chosen by the
// launcher), blockDim/lanes rows per block and the grid striding over rows;
// a row's sum is an xor butterfly of shuffles within its lanes
// (op_group_sum), with no shared memory or barrier. Summation order: each
// lane adds its vectors k = lane, lane + lanes, … in order, then its scalar
// tail, and the butterfly adds the lanes; the one-block-per-row kernels
// above add per thread over a stride of blockDim, then per warp, then across
// warps, so the two may differ in the last bit of an fp32 sum.

// op_rmsnorm_fwd_small: op_rmsnorm_fwd with lanes threads per row.
extern "C" __global__ void op_rmsnorm_fwd_small(const op_t *__restrict__ x,
                                                const op_t *__restrict__ w,
                                                op_t *__restrict__ y,
                                                float *__restrict__ rstd, int rows,
                                                int dim, float eps, int lanes) {
  int lane = threadIdx.x & (lanes - 1), per = blockDim.x / lanes;
  int nv = op_row_vecs(dim, op_aligned16(x) && op_aligned16(w) && op_aligned16(y));
  for (long long r0 = (long long)blockIdx.x * per; r0 < rows; r0 += (long long)gridDim.x * per) {
    long long r = r0 + threadIdx.x / lanes;
    bool live = r < rows; // the whole warp stays for the shuffles
    const op_t *xr = x + r * dim;
    op_t *yr = y + r * dim;
    float ss = op_group_sum(live ? op_row_sumsq(xr, nv, dim, lane, lanes) : 0.0f, lanes);
    if (!live) continue;
    float rs = 1.0f / sqrtf(ss / (float)dim + eps);
    if (lane == 0) rstd[r] = rs;
    op_row_norm(xr, w, yr, rs, nv, dim, lane, lanes);
  }
}

// op_rmsnorm_bwd_dx_small: op_rmsnorm_bwd_dx with lanes threads per row.
extern "C" __global__ void op_rmsnorm_bwd_dx_small(const op_t *__restrict__ x,
                                                   const op_t *__restrict__ w,
                                                   const float *__restrict__ rstd,
                                                   const op_t *__restrict__ dy,
                                                   op_t *__restrict__ dx, int rows,
                                                   int dim, int lanes, int accumulate) {
  int lane = threadIdx.x & (lanes - 1), per = blockDim.x / lanes;
  int nv = op_row_vecs(dim, op_aligned16(x) && op_aligned16(w) && op_aligned16(dy) && op_aligned16(dx));
  for (long long r0 = (long long)blockIdx.x * per; r0 < rows; r0 += (long long)gridDim.x * per) {
    long long r = r0 + threadIdx.x / lanes;
    bool live = r < rows; // the whole warp stays for the shuffles
    const op_t *xr = x + r * dim, *dyr = dy + r * dim;
    op_t *dxr = dx + r * dim;
    float dot = op_group_sum(live ? op_row_gdot(xr, w, dyr, nv, dim, lane, lanes) : 0.0f, lanes); // Σ g·x, times rs below
    if (!live) continue;
    float rs = rstd[r];
    float m = dot * rs / (float)dim;
    op_row_dx(xr, w, dyr, dxr, rs, m, accumulate, nv, dim, lane, lanes);
  }
}

// op_rmsnorm_bwd_dw: block (bx, k) sums dy·x·rstd over the rows
// [k·rows_per_chunk, (k+1)·rows_per_chunk) ∩ [0, rows) of its columns and
// writes partial[k·dim + c] (overwriting); op_colsum adds the chunks. With
// vec (the launcher's choice: rows of whole 16-byte vectors, x and dy
// aligned, blocks of at most OP_DW_THREADS threads) a block spans
// span = min(nv, blockDim) vectors from bx·span on; its threads form
// blockDim/span groups, group g takes the chunk's rows r0 + g, r0 + g +
// groups, … and a thread one vector of each, and the groups' sums are added
// through shared memory in group order. Without, a thread sums one column
// c = bx·blockDim + tid over the chunk's rows in order.
extern "C" __global__ void op_rmsnorm_bwd_dw(const op_t *__restrict__ x,
                                             const float *__restrict__ rstd,
                                             const op_t *__restrict__ dy,
                                             float *__restrict__ partial,
                                             int rows, int dim,
                                             int rows_per_chunk, int vec) {
  int k = blockIdx.y;
  int r0 = k * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  if (vec) {
    __shared__ float sums[OP_DW_THREADS * OP_VEC]; // [groups][span·OP_VEC]
    int nv = dim / OP_VEC, span = min(nv, (int)blockDim.x), groups = blockDim.x / span;
    int g = threadIdx.x / span, v = blockIdx.x * span + threadIdx.x % span;
    int width = span * OP_VEC; // the columns of a group's row
    if (g < groups && v < nv) {
      float s[OP_VEC] = {};
      for (int r = r0 + g; r < r1; r += groups) {
        long long i = (long long)r * dim + v * OP_VEC;
        float xs[OP_VEC], ds[OP_VEC];
        op_load_vec(x + i, xs);
        op_load_vec(dy + i, ds);
        float rs = rstd[r];
#pragma unroll
        for (int e = 0; e < OP_VEC; e++) s[e] += ds[e] * xs[e] * rs;
      }
#pragma unroll
      for (int e = 0; e < OP_VEC; e++) sums[g * width + (threadIdx.x % span) * OP_VEC + e] = s[e];
    }
    __syncthreads();
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
      int col = blockIdx.x * width + c;
      if (col >= dim) break;
      float acc = 0.0f;
      for (int q = 0; q < groups; q++) acc += sums[q * width + c];
      partial[(long long)k * dim + col] = acc;
    }
    return;
  }
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  float acc = 0.0f;
  for (int r = r0; r < r1; r++) {
    long long i = (long long)r * dim + c;
    acc += op_f32(dy[i]) * op_f32(x[i]) * rstd[r];
  }
  partial[(long long)k * dim + c] = acc;
}

// op_rmsnorm_bwd: op_rmsnorm_bwd_dx and op_rmsnorm_bwd_dw's scalar path in
// one pass over x and dy, for rows of whole 16-byte vectors (every pointer
// aligned) that a block holds in registers, nv = dim/OP_VEC ≤
// OP_NORM_VECS·blockDim (the launcher's choice). Block k takes the rows
// [k·rows_per_chunk, (k+1)·rows_per_chunk) ∩ [0, rows) one after another,
// thread t the vectors t + j·blockDim (j < OP_NORM_VECS) of each: it writes
// (or with accumulate adds) dx as op_rmsnorm_bwd_dx does, in the same
// order of sums, and sums dy·x·rstd per column over the chunk's rows in
// order into partial[k·dim + c] (overwriting), as the scalar dw path does.
extern "C" __global__ void op_rmsnorm_bwd(const op_t *__restrict__ x,
                                          const op_t *__restrict__ w,
                                          const float *__restrict__ rstd,
                                          const op_t *__restrict__ dy,
                                          op_t *__restrict__ dx,
                                          float *__restrict__ partial, int rows,
                                          int dim, int rows_per_chunk,
                                          int accumulate) {
  __shared__ float sh[32];
  int nv = dim / OP_VEC;
  int r0 = blockIdx.x * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  op_vec16 wv[OP_NORM_VECS]; // raw storage vectors: half the registers of fp32 in bf16
  float dw[OP_NORM_VECS][OP_VEC] = {};
#pragma unroll
  for (int j = 0; j < OP_NORM_VECS; j++) {
    int v = threadIdx.x + j * blockDim.x;
    if (v < nv) wv[j].u = *(const uint4 *)(w + v * OP_VEC);
  }
  for (int r = r0; r < r1; r++) {
    long long base = (long long)r * dim;
    op_vec16 xv[OP_NORM_VECS], dv[OP_NORM_VECS];
    float rs = rstd[r];
    float dot = 0.0f; // Σ g·x, times rs below
#pragma unroll
    for (int j = 0; j < OP_NORM_VECS; j++) {
      int v = threadIdx.x + j * blockDim.x;
      if (v >= nv) continue;
      xv[j].u = *(const uint4 *)(x + base + v * OP_VEC);
      dv[j].u = *(const uint4 *)(dy + base + v * OP_VEC);
#pragma unroll
      for (int e = 0; e < OP_VEC; e++) dot += op_f32(dv[j].e[e]) * op_f32(wv[j].e[e]) * op_f32(xv[j].e[e]);
    }
    dot = op_block_sum(dot, sh);
    float m = dot * rs / (float)dim;
#pragma unroll
    for (int j = 0; j < OP_NORM_VECS; j++) {
      int v = threadIdx.x + j * blockDim.x;
      if (v >= nv) continue;
      float os[OP_VEC] = {};
      if (accumulate) op_load_vec(dx + base + v * OP_VEC, os);
#pragma unroll
      for (int e = 0; e < OP_VEC; e++) {
        float d = op_f32(dv[j].e[e]), xe = op_f32(xv[j].e[e]);
        os[e] += rs * (d * op_f32(wv[j].e[e]) - xe * rs * m);
        dw[j][e] += d * xe * rs;
      }
      op_store_vec(dx + base + v * OP_VEC, os);
    }
  }
#pragma unroll
  for (int j = 0; j < OP_NORM_VECS; j++) {
    int v = threadIdx.x + j * blockDim.x;
    if (v < nv) op_store_f32_vec(partial + (long long)blockIdx.x * dim + v * OP_VEC, dw[j]);
  }
}
