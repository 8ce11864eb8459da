// op_xent.cu: softmax cross-entropy over rows × vocab logits
// (tensor.Backend's SoftmaxXent). One block per row: one pass keeps a running
// max, sum of exp(z − max) and first argmax per thread in fp32 (merged across
// the block), a second pass overwrites the row with its gradient. Rows are
// read in 16-byte vectors when vocab is a multiple of the vector width.
#include "op_common.cuh"

#define OP_XENT_NONE 0x7fffffff // argmax of a thread that saw no element

// op_xent_acc is a running (max, Σ exp(z − max), first index of the max).
struct op_xent_acc {
  float m, s;
  int i;
};

__device__ __forceinline__ void op_xent_visit(op_xent_acc &a, float v, int j) {
  if (v > a.m) {
    a.s = a.s * expf(a.m - v) + 1.0f; // exp(−inf) = 0 on the first element
    a.m = v;
    a.i = j;
  } else {
    a.s += expf(v - a.m);
  }
}

// op_xent_merge combines b into a; ties of the max keep the smaller index.
__device__ __forceinline__ void op_xent_merge(op_xent_acc &a, op_xent_acc b) {
  float m = fmaxf(a.m, b.m);
  float s = (a.m == OP_NEG_INF ? 0.0f : a.s * expf(a.m - m)) +
            (b.m == OP_NEG_INF ? 0.0f : b.s * expf(b.m - m));
  if (b.m > a.m || (b.m == a.m && b.i < a.i)) a.i = b.i;
  a.m = m;
  a.s = s;
}

__device__ __forceinline__ op_xent_acc op_xent_shfl(op_xent_acc a, int o) {
  op_xent_acc b;
  b.m = __shfl_xor_sync(0xffffffffu, a.m, o);
  b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
  b.i = __shfl_xor_sync(0xffffffffu, a.i, o);
  return b;
}

// op_softmax_xent: for row r < rows with t = targets[r] in [0, vocab):
// loss[r] = logsumexp(z) − z[t], argmax[r] = first index of max(z), and the
// row is overwritten by scale[r]·(softmax(z) − onehot(t)). A row with t < 0
// gets loss 0, argmax −1 and zeros; t ≥ vocab (a caller's bug) gets NaN loss,
// argmax −1 and a NaN row. The block size is a multiple of 32, at most 1024.
extern "C" __global__ void op_softmax_xent(op_t *__restrict__ logits, int rows,
                                           int vocab,
                                           const int *__restrict__ targets,
                                           const float *__restrict__ scale,
                                           float *__restrict__ loss,
                                           int *__restrict__ argmax) {
  __shared__ op_xent_acc sh[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  op_t *z = logits + (long long)r * vocab;
  int t = targets[r];
  bool vec = vocab % OP_VEC == 0 && op_aligned16(logits);
  int nv = vocab / OP_VEC;
  if (t < 0 || t >= vocab) {
    float fill = t < 0 ? 0.0f : __int_as_float(0x7fc00000);
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) op_put(z + j, fill);
    if (threadIdx.x == 0) {
      loss[r] = fill;
      argmax[r] = -1;
    }
    return;
  }
  float zt = op_f32(z[t]); // read before any thread overwrites the row

  op_xent_acc a = {OP_NEG_INF, 0.0f, OP_XENT_NONE};
  if (vec) {
    const uint4 *zv = (const uint4 *)z;
    for (int k = threadIdx.x; k < nv; k += blockDim.x) {
      op_vec16 u;
      u.u = zv[k];
#pragma unroll
      for (int e = 0; e < OP_VEC; e++) op_xent_visit(a, op_f32(u.e[e]), k * OP_VEC + e);
    }
  } else {
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) op_xent_visit(a, op_f32(z[j]), j);
  }
  for (int o = 16; o > 0; o >>= 1) op_xent_merge(a, op_xent_shfl(a, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) sh[warp] = a;
  __syncthreads();
  if (warp == 0) {
    a = lane < nw ? sh[lane] : op_xent_acc{OP_NEG_INF, 0.0f, OP_XENT_NONE};
    for (int o = 16; o > 0; o >>= 1) op_xent_merge(a, op_xent_shfl(a, o));
    if (lane == 0) sh[0] = a;
  }
  __syncthreads();
  a = sh[0];
  float sr = scale[r];
  if (threadIdx.x == 0) {
    loss[r] = logf(a.s) - (zt - a.m);
    argmax[r] = a.i == OP_XENT_NONE ? 0 : a.i;
  }
  float inv = sr / a.s;
  if (vec) {
    uint4 *zv = (uint4 *)z;
    for (int k = threadIdx.x; k < nv; k += blockDim.x) {
      op_vec16 u;
      u.u = zv[k];
#pragma unroll
      for (int e = 0; e < OP_VEC; e++) {
        int j = k * OP_VEC + e;
        float g = expf(op_f32(u.e[e]) - a.m) * inv;
        op_put(&u.e[e], j == t ? g - sr : g);
      }
      zv[k] = u.u;
    }
  } else {
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
      float g = expf(op_f32(z[j]) - a.m) * inv;
      op_put(z + j, j == t ? g - sr : g);
    }
  }
}
