// op_rmsnorm.cu: RMSNorm forward and backward (tensor.Backend's RMSNorm and
// RMSNormBackward). x, w, y, dy, dx are storage elements; rstd, the dw
// partial sums and dw are fp32. The weight gradient is deterministic: each
// block of op_rmsnorm_bwd_dw sums a fixed chunk of rows per column into
// partial[chunk, dim], and op_colsum (op_rows.cu) adds the chunks, in order,
// into dw.
#include "op_common.cuh"

// op_rmsnorm_fwd: one block per row r < rows of dim columns:
// rstd[r] = 1/sqrt(mean(x²) + eps), y = x·rstd·w.
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
  float ss = 0.0f;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) {
    float v = op_f32(xr[c]);
    ss += v * v;
  }
  ss = op_block_sum(ss, sh);
  float rs = 1.0f / sqrtf(ss / (float)dim + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (int c = threadIdx.x; c < dim; c += blockDim.x)
    op_put(yr + c, op_f32(xr[c]) * rs * op_f32(w[c]));
}

// op_rmsnorm_bwd_dx: one block per row; with x̂ = x·rstd and g = dy·w,
// dx += rstd·(g − x̂·mean(g·x̂)).
extern "C" __global__ void op_rmsnorm_bwd_dx(const op_t *__restrict__ x,
                                             const op_t *__restrict__ w,
                                             const float *__restrict__ rstd,
                                             const op_t *__restrict__ dy,
                                             op_t *__restrict__ dx, int rows,
                                             int dim) {
  __shared__ float sh[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  long long base = (long long)r * dim;
  float rs = rstd[r];
  float dot = 0.0f; // Σ g·x, times rs below
  for (int c = threadIdx.x; c < dim; c += blockDim.x)
    dot += op_f32(dy[base + c]) * op_f32(w[c]) * op_f32(x[base + c]);
  dot = op_block_sum(dot, sh);
  float m = dot * rs / (float)dim;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) {
    float g = op_f32(dy[base + c]) * op_f32(w[c]);
    float v = op_f32(x[base + c]);
    op_put(dx + base + c, op_f32(dx[base + c]) + rs * (g - v * rs * m));
  }
}

// op_rmsnorm_bwd_dw: block (bx, k) sums dy·x·rstd over the rows
// [k·rows_per_chunk, (k+1)·rows_per_chunk) ∩ [0, rows) of its columns
// c = bx·blockDim + tid and writes partial[k·dim + c] (overwriting).
extern "C" __global__ void op_rmsnorm_bwd_dw(const op_t *__restrict__ x,
                                             const float *__restrict__ rstd,
                                             const op_t *__restrict__ dy,
                                             float *__restrict__ partial,
                                             int rows, int dim,
                                             int rows_per_chunk) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  int k = blockIdx.y;
  int r0 = k * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  float acc = 0.0f;
  for (int r = r0; r < r1; r++) {
    long long i = (long long)r * dim + c;
    acc += op_f32(dy[i]) * op_f32(x[i]) * rstd[r];
  }
  partial[(long long)k * dim + c] = acc;
}
