// op_ew.cu: elementwise vector updates (tensor.Backend's Axpy and Scale) over
// n storage elements.
#include "op_common.cuh"

// op_axpy: y += alpha·x.
extern "C" __global__ void op_axpy(float alpha, const op_t *__restrict__ x,
                                   op_t *__restrict__ y, long long n) {
  for (long long i = op_global_id(); i < n; i += op_global_stride())
    op_put(y + i, op_f32(y[i]) + alpha * op_f32(x[i]));
}

// op_scale: x *= alpha.
extern "C" __global__ void op_scale(float alpha, op_t *__restrict__ x, long long n) {
  for (long long i = op_global_id(); i < n; i += op_global_stride())
    op_put(x + i, alpha * op_f32(x[i]));
}
