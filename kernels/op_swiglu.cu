// op_swiglu.cu: SwiGLU forward and backward (tensor.Backend's SwiGLU and
// SwiGLUBackward), elementwise over n storage elements, 16 bytes per access
// where aligned (op_common.cuh's vectorised loops); and the same on one
// packed product y2 [rows, 2·cols] holding gate and up side by side in each
// row (SwiGLUPacked and SwiGLUPackedBackward).
#include "op_common.cuh"

__device__ __forceinline__ float op_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// op_silu_mul is silu(g)·u with silu(g) = g·σ(g).
__device__ __forceinline__ float op_silu_mul(float g, float u) { return g * op_sigmoid(g) * u; }

// op_swiglu_grads adds to *dg and *du the gradients of silu(g)·u for
// upstream d: dg += d·u·σ(g)·(1 + g·(1−σ(g))), du += d·silu(g).
__device__ __forceinline__ void op_swiglu_grads(float g, float u, float d, float *dg, float *du) {
  float s = op_sigmoid(g);
  *dg += d * u * s * (1.0f + g * (1.0f - s));
  *du += d * g * s;
}

// op_swiglu_fwd: out = silu(gate)·up.
extern "C" __global__ void op_swiglu_fwd(const op_t *__restrict__ gate,
                                         const op_t *__restrict__ up,
                                         op_t *__restrict__ out, long long n) {
  bool vec = op_aligned16(gate) && op_aligned16(up) && op_aligned16(out);
  long long nv = vec ? n / OP_VEC : 0;
  for (long long v = op_global_id(); v < nv; v += op_global_stride()) {
    float g[OP_VEC], u[OP_VEC];
    op_load_vec(gate + v * OP_VEC, g);
    op_load_vec(up + v * OP_VEC, u);
#pragma unroll
    for (int k = 0; k < OP_VEC; k++) g[k] = op_silu_mul(g[k], u[k]);
    op_store_vec(out + v * OP_VEC, g);
  }
  for (long long i = nv * OP_VEC + op_global_id(); i < n; i += op_global_stride())
    op_put(out + i, op_silu_mul(op_f32(gate[i]), op_f32(up[i])));
}

// op_swiglu_bwd: dgate = dout·up·σ(g)·(1 + g·(1−σ(g))) and
// dup = dout·silu(g), or dgate += and dup += those when accumulate is
// non-zero (dgate and dup are read only then); a null dgate or dup is
// skipped.
extern "C" __global__ void op_swiglu_bwd(const op_t *__restrict__ gate,
                                         const op_t *__restrict__ up,
                                         const op_t *__restrict__ dout,
                                         op_t *__restrict__ dgate,
                                         op_t *__restrict__ dup, long long n,
                                         int accumulate) {
  bool vec = op_aligned16(gate) && op_aligned16(up) && op_aligned16(dout) &&
             op_aligned16(dgate) && op_aligned16(dup); // null is aligned
  long long nv = vec ? n / OP_VEC : 0;
  for (long long v = op_global_id(); v < nv; v += op_global_stride()) {
    long long i = v * OP_VEC;
    float g[OP_VEC], u[OP_VEC], d[OP_VEC], dg[OP_VEC] = {}, du[OP_VEC] = {};
    op_load_vec(gate + i, g);
    op_load_vec(up + i, u);
    op_load_vec(dout + i, d);
    if (dgate && accumulate) op_load_vec(dgate + i, dg);
    if (dup && accumulate) op_load_vec(dup + i, du);
#pragma unroll
    for (int k = 0; k < OP_VEC; k++) op_swiglu_grads(g[k], u[k], d[k], &dg[k], &du[k]);
    if (dgate) op_store_vec(dgate + i, dg);
    if (dup) op_store_vec(dup + i, du);
  }
  for (long long i = nv * OP_VEC + op_global_id(); i < n; i += op_global_stride()) {
    float dg = dgate && accumulate ? op_f32(dgate[i]) : 0.0f, du = dup && accumulate ? op_f32(dup[i]) : 0.0f;
    op_swiglu_grads(op_f32(gate[i]), op_f32(up[i]), op_f32(dout[i]), &dg, &du);
    if (dgate) op_put(dgate + i, dg);
    if (dup) op_put(dup + i, du);
  }
}

// op_swiglu_packed_fwd: out[r,c] = silu(y2[r,c])·y2[r,cols+c] for out
// [rows, cols]; 16-byte accesses when cols is a multiple of a vector and
// both are aligned.
extern "C" __global__ void op_swiglu_packed_fwd(const op_t *__restrict__ y2,
                                                op_t *__restrict__ out,
                                                long long rows, int cols) {
  long long n = rows * cols;
  bool vec = cols % OP_VEC == 0 && op_aligned16(y2) && op_aligned16(out);
  long long nv = vec ? n / OP_VEC : 0, cv = cols / OP_VEC;
  for (long long v = op_global_id(); v < nv; v += op_global_stride()) {
    long long r = v / cv;
    const op_t *p = y2 + r * 2 * cols + (v - r * cv) * OP_VEC;
    float g[OP_VEC], u[OP_VEC];
    op_load_vec(p, g);
    op_load_vec(p + cols, u);
#pragma unroll
    for (int k = 0; k < OP_VEC; k++) g[k] = op_silu_mul(g[k], u[k]);
    op_store_vec(out + v * OP_VEC, g);
  }
  for (long long i = nv * OP_VEC + op_global_id(); i < n; i += op_global_stride()) {
    long long j = i + i / cols * cols; // gate's index in y2; up's is j+cols
    op_put(out + i, op_silu_mul(op_f32(y2[j]), op_f32(y2[j + cols])));
  }
}

// op_swiglu_packed_e4m3: op_swiglu_packed_fwd whose out goes straight to
// E4M3, a row at a time (one block per row): v = silu(g)·u as
// op_swiglu_packed_fwd stores it, scales[r] = max |v| / 448 and codes =
// e4m3(v / scales[r]), as op_quant_rows_e4m3 of that out, bit for bit. v is
// never stored: a row that fits the block's registers (op_row_fits) is made
// once and held; a larger or unaligned one is made twice (the second pass
// reads y2's row again from cache).
extern "C" __global__ void op_swiglu_packed_e4m3(const op_t *__restrict__ y2,
                                                 unsigned char *__restrict__ codes,
                                                 float *__restrict__ scales,
                                                 int rows, int cols) {
  __shared__ float sh[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const op_t *g = y2 + (long long)r * 2 * cols, *u = g + cols;
  unsigned char *q = codes + (long long)r * cols;
  int nv = cols % OP_VEC == 0 && op_aligned16(y2) && op_aligned16(codes) ? cols / OP_VEC : 0;
  if (op_row_fits(nv)) {
    op_vec16 v[OP_ROW_VECS], uv[OP_ROW_VECS]; // v: gate, then the values
    op_row_load(g, nv, v);
    op_row_load(u, nv, uv);
#pragma unroll
    for (int j = 0; j < OP_ROW_VECS; j++)
      if ((int)threadIdx.x + j * (int)blockDim.x < nv)
#pragma unroll
        for (int e = 0; e < OP_VEC; e++) op_put(&v[j].e[e], op_silu_mul(op_f32(v[j].e[e]), op_f32(uv[j].e[e])));
    op_row_e4m3(v, nv, q, scales + r, sh);
    return;
  }
  float a = 0.0f;
  for (int k = threadIdx.x; k < nv; k += blockDim.x) {
    float gs[OP_VEC], us[OP_VEC];
    op_load_vec(g + k * OP_VEC, gs);
    op_load_vec(u + k * OP_VEC, us);
#pragma unroll
    for (int e = 0; e < OP_VEC; e++) a = fmaxf(a, fabsf(op_stored(op_silu_mul(gs[e], us[e]))));
  }
  for (int c = nv * OP_VEC + threadIdx.x; c < cols; c += blockDim.x)
    a = fmaxf(a, fabsf(op_stored(op_silu_mul(op_f32(g[c]), op_f32(u[c])))));
  float sc = op_e4m3_scale(op_block_max(a, sh));
  if (threadIdx.x == 0) scales[r] = sc;
  for (int k = threadIdx.x; k < nv; k += blockDim.x) {
    float gs[OP_VEC], us[OP_VEC];
    op_load_vec(g + k * OP_VEC, gs);
    op_load_vec(u + k * OP_VEC, us);
    unsigned char out[OP_VEC];
#pragma unroll
    for (int e = 0; e < OP_VEC; e++) out[e] = op_e4m3(op_stored(op_silu_mul(gs[e], us[e])) / sc);
    op_store_codes(q + k * OP_VEC, out);
  }
  for (int c = nv * OP_VEC + threadIdx.x; c < cols; c += blockDim.x)
    q[c] = op_e4m3(op_stored(op_silu_mul(op_f32(g[c]), op_f32(u[c]))) / sc);
}

// op_swiglu_packed_bwd: for dout [rows, cols], dy2[r,c] = dgate and
// dy2[r,cols+c] = dup of op_swiglu_bwd, or += with accumulate (dy2 is read
// only then). dy2 may be y2 itself without accumulate: every element is
// read before the same thread writes it.
extern "C" __global__ void op_swiglu_packed_bwd(const op_t *y2,
                                                const op_t *__restrict__ dout,
                                                op_t *dy2, long long rows,
                                                int cols, int accumulate) {
  long long n = rows * cols;
  bool vec = cols % OP_VEC == 0 && op_aligned16(y2) && op_aligned16(dout) && op_aligned16(dy2);
  long long nv = vec ? n / OP_VEC : 0, cv = cols / OP_VEC;
  for (long long v = op_global_id(); v < nv; v += op_global_stride()) {
    long long r = v / cv, j = r * 2 * cols + (v - r * cv) * OP_VEC;
    float g[OP_VEC], u[OP_VEC], d[OP_VEC], dg[OP_VEC] = {}, du[OP_VEC] = {};
    op_load_vec(y2 + j, g);
    op_load_vec(y2 + j + cols, u);
    op_load_vec(dout + v * OP_VEC, d);
    if (accumulate) {
      op_load_vec(dy2 + j, dg);
      op_load_vec(dy2 + j + cols, du);
    }
#pragma unroll
    for (int k = 0; k < OP_VEC; k++) op_swiglu_grads(g[k], u[k], d[k], &dg[k], &du[k]);
    op_store_vec(dy2 + j, dg);
    op_store_vec(dy2 + j + cols, du);
  }
  for (long long i = nv * OP_VEC + op_global_id(); i < n; i += op_global_stride()) {
    long long j = i + i / cols * cols;
    float dg = accumulate ? op_f32(dy2[j]) : 0.0f, du = accumulate ? op_f32(dy2[j + cols]) : 0.0f;
    op_swiglu_grads(op_f32(y2[j]), op_f32(y2[j + cols]), op_f32(dout[i]), &dg, &du);
    op_put(dy2 + j, dg);
    op_put(dy2 + j + cols, du);
  }
}
