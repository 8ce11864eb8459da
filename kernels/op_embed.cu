// op_embed.cu: embedding lookup and its gradient (tensor.Backend's Gather and
// ScatterAdd). One block per looked-up row; ids are int32.
#include "op_common.cuh"

// op_gather: out[i,:] = table[ids[i],:] for i < n (dim columns). An id out
// of [0, rows) writes a NaN row (ids are checked on the host where they are
// made; a bad one must not pass silently).
extern "C" __global__ void op_gather(const op_t *__restrict__ table,
                                     const int *__restrict__ ids,
                                     op_t *__restrict__ out, int n, int dim,
                                     int rows) {
  int i = blockIdx.x;
  if (i >= n) return;
  int id = ids[i];
  op_t *o = out + (long long)i * dim;
  if (id < 0 || id >= rows) {
    for (int c = threadIdx.x; c < dim; c += blockDim.x) op_put(o + c, __int_as_float(0x7fc00000));
    return;
  }
  const op_t *s = table + (long long)id * dim;
  if (dim % OP_VEC == 0 && op_aligned16(table) && op_aligned16(out)) {
    const uint4 *sv = (const uint4 *)s;
    uint4 *ov = (uint4 *)o;
    for (int c = threadIdx.x; c < dim / OP_VEC; c += blockDim.x) ov[c] = sv[c];
    return;
  }
  for (int c = threadIdx.x; c < dim; c += blockDim.x) o[c] = s[c];
}

// op_scatter_add: dtable[ids[i],:] += dout[i,:] in fp32 atomics (repeated
// ids add up; the order of the additions is not fixed). Ids out of
// [0, rows) are skipped.
extern "C" __global__ void op_scatter_add(const op_t *__restrict__ dout,
                                          const int *__restrict__ ids,
                                          float *__restrict__ dtable, int n,
                                          int dim, int rows) {
  int i = blockIdx.x;
  if (i >= n) return;
  int id = ids[i];
  if (id < 0 || id >= rows) return;
  const op_t *g = dout + (long long)i * dim;
  float *d = dtable + (long long)id * dim;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) atomicAdd(d + c, op_f32(g[c]));
}
