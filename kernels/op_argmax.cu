// op_argmax.cu: the argmax of each row (tensor.Backend's ArgmaxRows), what
// greedy decoding reads of its logits instead of downloading them. One block
// per row; each element becomes a 64-bit key (an order-preserving image of
// its value above the bitwise complement of its index), so the whole row
// reduces by an unsigned max: the largest value wins, then the lowest index.
// Rows are read in 16-byte vectors when cols is a multiple of the vector
// width and the storage is aligned.
#include "op_common.cuh"

// op_argmax_key maps v to a 32-bit key in v's order: NaN above every number
// (the row's first NaN wins, as tensor.Argmax), −0 equal to +0. Every key is
// above 0 (−inf maps to 0x007fffff), so 0 is the reduction's empty value.
__device__ __forceinline__ unsigned long long op_argmax_key(float v, int j) {
  unsigned k;
  if (v != v) {
    k = 0xffffffffu;
  } else {
    unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
    k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
  return ((unsigned long long)k << 32) | (unsigned)~j;
}

__device__ __forceinline__ unsigned long long op_argmax_max(unsigned long long a, unsigned long long b) {
  return a > b ? a : b;
}

__device__ __forceinline__ unsigned long long op_argmax_warp(unsigned long long a) {
  for (int o = 16; o > 0; o >>= 1) a = op_argmax_max(a, __shfl_xor_sync(0xffffffffu, a, o));
  return a;
}

// op_argmax_rows: out[r] = the lowest index of the largest element of row r
// of x (rows × cols, cols ≥ 1), NaN counting as the largest. The block size
// is a multiple of 32, at most 1024.
extern "C" __global__ void op_argmax_rows(const op_t *__restrict__ x, int rows,
                                          int cols, int *__restrict__ out) {
  __shared__ unsigned long long sh[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const op_t *z = x + (long long)r * cols;
  unsigned long long a = 0;
  if (cols % OP_VEC == 0 && op_aligned16(x)) {
    const uint4 *zv = (const uint4 *)z;
    int nv = cols / OP_VEC;
    for (int k = threadIdx.x; k < nv; k += blockDim.x) {
      op_vec16 u;
      u.u = zv[k];
#pragma unroll
      for (int e = 0; e < OP_VEC; e++) a = op_argmax_max(a, op_argmax_key(op_f32(u.e[e]), k * OP_VEC + e));
    }
  } else {
    for (int j = threadIdx.x; j < cols; j += blockDim.x) a = op_argmax_max(a, op_argmax_key(op_f32(z[j]), j));
  }
  a = op_argmax_warp(a);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) sh[warp] = a;
  __syncthreads();
  if (warp == 0) {
    a = op_argmax_warp(lane < nw ? sh[lane] : 0ull);
    if (lane == 0) out[r] = (int)~(unsigned)a;
  }
}
