// op_rows.cu: row broadcasts and column sums (tensor.Backend's AddRows and
// SumRows), and op_colsum, the second, ordered stage of every deterministic
// column sum (SumRows here, RMSNorm's weight gradient in op_rmsnorm.cu).
#include "op_common.cuh"

// op_add_rows: y[r,:] += v for the total/n rows of y (n columns); 16 bytes
// per access when y and v are aligned and n is a whole number of vectors.
extern "C" __global__ void op_add_rows(op_t *__restrict__ y,
                                       const op_t *__restrict__ v,
                                       long long total, int n) {
  bool vec = op_aligned16(y) && op_aligned16(v) && n % OP_VEC == 0;
  long long nv = vec ? total / OP_VEC : 0;
  for (long long k = op_global_id(); k < nv; k += op_global_stride()) {
    long long i = k * OP_VEC;
    float ys[OP_VEC], vs[OP_VEC];
    op_load_vec(y + i, ys);
    op_load_vec(v + i % n, vs);
#pragma unroll
    for (int e = 0; e < OP_VEC; e++) ys[e] += vs[e];
    op_store_vec(y + i, ys);
  }
  for (long long i = nv * OP_VEC + op_global_id(); i < total; i += op_global_stride())
    op_put(y + i, op_f32(y[i]) + op_f32(v[i % n]));
}

// op_sum_rows: block (bx, k) sums y over the rows [k·rows_per_chunk,
// (k+1)·rows_per_chunk) ∩ [0, rows) of its columns c = bx·blockDim + tid and
// writes partial[k·n + c] (overwriting).
extern "C" __global__ void op_sum_rows(const op_t *__restrict__ y,
                                       float *__restrict__ partial, int rows,
                                       int n, int rows_per_chunk) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n) return;
  int k = blockIdx.y;
  int r0 = k * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  float acc = 0.0f;
  for (int r = r0; r < r1; r++) acc += op_f32(y[(long long)r * n + c]);
  partial[(long long)k * n + c] = acc;
}

// op_colsum: v[c] += Σ_k partial[k·n + c] for k < chunks, summed in order of
// k (so the result does not depend on the launch).
extern "C" __global__ void op_colsum(const float *__restrict__ partial,
                                     float *__restrict__ v, int chunks, int n) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < chunks; k++) acc += partial[(long long)k * n + c];
  v[c] += acc;
}
