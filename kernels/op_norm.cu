// op_norm.cu: the sum of squares of an fp32 buffer (the global gradient
// norm of a parameter arena), in two stages: op_sumsq leaves one partial
// sum per block, which the host adds in order (it reads them back anyway:
// clipping needs the norm on the host).
#include "op_common.cuh"

// op_sumsq: partial[b] = Σ x[i]² over block b's grid-stride share of the n
// elements, accumulated in fp64 per thread and per block (so the result
// does not depend on more than the launch's grid).
extern "C" __global__ void op_sumsq(const float *__restrict__ x, long long n,
                                    double *__restrict__ partial) {
  __shared__ double sh[32];
  double acc = 0.0;
  for (long long i = op_global_id(); i < n; i += op_global_stride()) {
    double v = x[i];
    acc += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) sh[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < nw ? sh[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) partial[blockIdx.x] = acc;
  }
}
