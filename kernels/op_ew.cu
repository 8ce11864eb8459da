// op_ew.cu: elementwise vector updates (tensor.Backend's Axpy and Scale) over
// n storage elements, 16 bytes per access where aligned (op_common.cuh's
// vectorised loops).
#include "op_common.cuh"

// op_axpy: y += alpha·x.
extern "C" __global__ void op_axpy(float alpha, const op_t *__restrict__ x,
                                   op_t *__restrict__ y, long long n) {
  long long nv = op_aligned16(x) && op_aligned16(y) ? n / OP_VEC : 0;
  for (long long v = op_global_id(); v < nv; v += op_global_stride()) {
    float xs[OP_VEC], ys[OP_VEC];
    op_load_vec(x + v * OP_VEC, xs);
    op_load_vec(y + v * OP_VEC, ys);
#pragma unroll
    for (int k = 0; k < OP_VEC; k++) ys[k] += alpha * xs[k];
    op_store_vec(y + v * OP_VEC, ys);
  }
  for (long long i = nv * OP_VEC + op_global_id(); i < n; i += op_global_stride())
    op_put(y + i, op_f32(y[i]) + alpha * op_f32(x[i]));
}

// op_scale: x *= alpha.
extern "C" __global__ void op_scale(float alpha, op_t *__restrict__ x, long long n) {
  long long nv = op_aligned16(x) ? n / OP_VEC : 0;
  for (long long v = op_global_id(); v < nv; v += op_global_stride()) {
    float xs[OP_VEC];
    op_load_vec(x + v * OP_VEC, xs);
#pragma unroll
    for (int k = 0; k < OP_VEC; k++) xs[k] *= alpha;
    op_store_vec(x + v * OP_VEC, xs);
  }
  for (long long i = nv * OP_VEC + op_global_id(); i < n; i += op_global_stride())
    op_put(x + i, alpha * op_f32(x[i]));
}
