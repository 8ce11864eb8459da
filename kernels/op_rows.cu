// op_rows.cu: row broadcasts and column sums (tensor.Backend's AddRows and
// SumRows), and op_colsum, the second, ordered stage of every deterministic
// column sum (SumRows here, RMSNorm's weight gradient in op_rmsnorm.cu).
//
// Block shapes from the Go launcher (tensor/tensorcuda compileOptions); a
// standalone build: nvcc -arch=sm_90 -Xptxas -v -c -DOP_BF16=1 -DOP_ROW_VECS=8
// -DOP_COLSUM_COLS=32 -DOP_COLSUM_LANES=8 kernels/op_rows.cu
#include "op_common.cuh"

// OP_COLSUM_COLS, OP_COLSUM_LANES: op_colsum's block of columns × lanes
// (the launcher's colSumCols, colSumLanes).
#ifndef OP_COLSUM_COLS
#error "OP_COLSUM_COLS is set by the Go launcher (-DOP_COLSUM_COLS=32)"
#endif
#ifndef OP_COLSUM_LANES
#error "OP_COLSUM_LANES is set by the Go launcher (-DOP_COLSUM_LANES=8)"
#endif

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

// op_colsum: v[c] += Σ_k partial[k·n + c] for k < chunks, in an order fixed
// by chunks alone (so the result does not depend on the launch): a block
// of OP_COLSUM_COLS columns × OP_COLSUM_LANES lanes, lane j summing the
// chunks k ≡ j (mod OP_COLSUM_LANES) in order, then the lanes' sums added in
// lane order. The lanes keep thousands of chunks (a narrow sum over many
// rows) from being one long serial loop per column.
extern "C" __global__ void op_colsum(const float *__restrict__ partial,
                                     float *__restrict__ v, int chunks, int n) {
  __shared__ float sh[OP_COLSUM_LANES][OP_COLSUM_COLS + 1];
  int cx = threadIdx.x % OP_COLSUM_COLS, lane = threadIdx.x / OP_COLSUM_COLS;
  int c = blockIdx.x * OP_COLSUM_COLS + cx;
  float acc = 0.0f;
  if (c < n)
    for (int k = lane; k < chunks; k += OP_COLSUM_LANES) acc += partial[(long long)k * n + c];
  sh[lane][cx] = acc;
  __syncthreads();
  if (lane == 0 && c < n) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < OP_COLSUM_LANES; j++) s += sh[j][cx];
    v[c] += s;
  }
}
