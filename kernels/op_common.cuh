// op_common.cuh holds what the tensor-op kernels (op_*.cu) share: the
// storage element type, its conversions to and from fp32, and block
// reductions. Storage is bf16 (OP_BF16 1, the default) or fp32 (OP_BF16 0);
// arithmetic, accumulation and statistics are fp32 whatever the storage.
//
// No CUDA headers are included so the same text compiles under nvcc and
// NVRTC alike; package tensor/tensorcuda splices this file in place of the
// #include line and passes -DOP_BF16 and the kernels' block shapes through
// its compile options (compileOptions). A standalone build gives them too,
// e.g. for bf16 storage:
//   nvcc -arch=sm_90 -Xptxas -v -c -DOP_BF16=1 -DOP_ROW_VECS=8 -DOP_DW_THREADS=256
//     -DOP_NORM_VECS=2 -DOP_COLSUM_COLS=32 -DOP_COLSUM_LANES=8 kernels/op_X.cu
// (each op_X.cu names the ones it needs).
#pragma once

#ifndef OP_BF16
#error "OP_BF16 is set by the Go launcher (-DOP_BF16=1 for bf16 storage, 0 for fp32)"
#endif

#if OP_BF16
typedef unsigned short op_t; // raw bf16 bits
#else
typedef float op_t;
#endif

// OP_VEC is the number of storage elements in one 16-byte vector load.
#define OP_VEC (16 / (int)sizeof(op_t))

#define OP_NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float op_f32(float x) { return x; }
__device__ __forceinline__ float op_f32(unsigned short x) {
  return __uint_as_float(((unsigned)x) << 16);
}

// op_bf16 rounds f to bf16 to nearest even; a NaN stays a (quiet) NaN.
// It is safetensors.Float32ToBF16 in CUDA.
__device__ __forceinline__ unsigned short op_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

__device__ __forceinline__ void op_put(float *p, float v) { *p = v; }
__device__ __forceinline__ void op_put(unsigned short *p, float v) { *p = op_bf16(v); }

// op_mma_bf16 adds the 16×8 product of A (4 registers of bf16 pairs, row
// major) and B (2, column major) to the fp32 accumulators d: one
// mma.sync.m16n8k16 (sm_80 and later), the decoding kernels' tensor-core op.
__device__ __forceinline__ void op_mma_bf16(float *d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// op_aligned16 reports whether p is 16-byte aligned (vector loads allowed).
__device__ __forceinline__ bool op_aligned16(const void *p) {
  return (((unsigned long long)p) & 15ull) == 0;
}

// op_vec16 is 16 bytes of storage elements, loaded and stored at once.
union op_vec16 {
  uint4 u;
  op_t e[OP_VEC];
};

// op_load_vec reads the OP_VEC storage elements at p (16-byte aligned) in
// one access, as fp32.
__device__ __forceinline__ void op_load_vec(const op_t *p, float *f) {
  op_vec16 v;
  v.u = *(const uint4 *)p;
#pragma unroll
  for (int k = 0; k < OP_VEC; k++) f[k] = op_f32(v.e[k]);
}

// op_store_vec rounds f[0..OP_VEC) to storage and writes them at p
// (16-byte aligned) in one access.
__device__ __forceinline__ void op_store_vec(op_t *p, const float *f) {
  op_vec16 v;
#pragma unroll
  for (int k = 0; k < OP_VEC; k++) op_put(&v.e[k], f[k]);
  *(uint4 *)p = v.u;
}

// op_load_f32_vec reads OP_VEC fp32 values at p (16-byte aligned), as many
// as one storage vector holds elements, in 16-byte accesses.
__device__ __forceinline__ void op_load_f32_vec(const float *p, float *f) {
#pragma unroll
  for (int k = 0; k < OP_VEC; k += 4) {
    float4 q = *(const float4 *)(p + k);
    f[k] = q.x, f[k + 1] = q.y, f[k + 2] = q.z, f[k + 3] = q.w;
  }
}

// op_store_f32_vec writes OP_VEC fp32 values at p (16-byte aligned) in
// 16-byte accesses.
__device__ __forceinline__ void op_store_f32_vec(float *p, const float *f) {
#pragma unroll
  for (int k = 0; k < OP_VEC; k += 4)
    *(float4 *)(p + k) = make_float4(f[k], f[k + 1], f[k + 2], f[k + 3]);
}

// Vectorised loops: a kernel whose pointers are all 16-byte aligned (and,
// for row-wise kernels, whose rows are whole vectors) runs its vector loop
// over n / OP_VEC vectors and a scalar loop over the n % OP_VEC tail;
// otherwise the vector loop is empty and the scalar loop covers all n.

// op_global_id and op_global_stride index a one-dimensional grid-stride
// loop in 64 bits.
__device__ __forceinline__ long long op_global_id() {
  return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long op_global_stride() {
  return (long long)gridDim.x * blockDim.x;
}

// op_udiv divides 32-bit indices by a fixed d (1 ≤ d ≤ 2³¹) with a
// multiply-high, an add and a shift instead of a division (Granlund and
// Montgomery's method for a run-time invariant divisor): with
// l = ⌈log2 d⌉ and m = ⌊2³²·(2ˡ − d)/d⌋ + 1, n / d = (umulhi(m, n) + n) >> l
// for every n < 2³². Built once per thread, outside the loops that use it.
struct op_udiv {
  unsigned m;
  int l;
  __device__ explicit op_udiv(unsigned d) {
    l = d > 1 ? 32 - __clz((int)(d - 1)) : 0;
    m = (unsigned)((((unsigned long long)((1ull << l) - d)) << 32) / d + 1);
  }
  __device__ __forceinline__ unsigned div(unsigned n) const {
    return (unsigned)(((unsigned long long)__umulhi(m, n) + n) >> l);
  }
};

// op_ldiv divides 64-bit indices by d with the division itself: the
// fallback of op_udiv for tensors of 2³¹ elements or more.
struct op_ldiv {
  long long d;
  __device__ explicit op_ldiv(long long dv) : d(dv) {}
  __device__ __forceinline__ long long div(long long n) const { return n / d; }
};

// op_index_small reports whether every element index below n fits the
// 32-bit arithmetic of op_udiv (n < 2³¹, so i + grid stride cannot wrap).
__device__ __forceinline__ bool op_index_small(long long n) { return n < (1ll << 31); }

// op_group_sum returns the sum of v over each aligned group of lanes
// threads of a warp (lanes a power of two ≤ 32, the same in the whole
// warp), to every thread of the group, by an xor butterfly. Every thread
// of the warp must call it.
__device__ __forceinline__ float op_group_sum(float v, int lanes) {
  for (int o = lanes >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float op_warp_sum(float v) { return op_group_sum(v, 32); }

// op_block_sum returns the sum of v over the block to every thread. The block
// size must be a multiple of 32 (at most 1024); sh holds 32 floats. It may be
// called repeatedly with the same sh.
__device__ __forceinline__ float op_block_sum(float v, float *sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = op_warp_sum(v);
  __syncthreads(); // sh may still be read by a previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  return op_warp_sum(v);
}

// E4M3: the FP8 side of the FP8 products (op_fp8.cu and the ops that write
// their rows in E4M3).

// op_e4m3 rounds f to E4M3FN to nearest even, saturating to ±448 (also
// for infinities), flushing below 2^-10 to a signed zero; a NaN becomes
// 0x7f. It is dtype.Float32ToF8E4M3 in CUDA.
__device__ __forceinline__ unsigned char op_e4m3(float f) {
  unsigned b = __float_as_uint(f);
  unsigned sign = (b >> 24) & 0x80u;
  unsigned a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;                    // NaN
  if (a >= 0x43e00000u) return (unsigned char)(sign | 0x7eu); // 448 and beyond
  int e = (int)(a >> 23);                              // float32 biased exponent
  if (e > 120) {                                       // E4M3 exponent e-120 >= 1: normal
    unsigned man = a & 0x7fffffu;
    unsigned code = ((unsigned)(e - 120) << 3) | (man >> 20);
    unsigned rem = man & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (code & 1u))) code++;
    return (unsigned char)(sign | code);
  }
  // subnormal (or rounded up to the smallest normal): m24 >> (141-e) units of 2^-9
  unsigned shift = (unsigned)(141 - e);
  if (e == 0 || shift > 24u) return (unsigned char)sign;
  unsigned m24 = (a & 0x7fffffu) | 0x800000u;
  unsigned q = m24 >> shift;
  unsigned rem = m24 & ((1u << shift) - 1u);
  unsigned half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return (unsigned char)(sign | q);
}

// op_block_max returns the largest of v over the block to every thread
// (v ≥ 0; block size a multiple of 32, at most 1024; sh holds 32 floats).
// It may follow another reduction over the same sh (op_block_sum).
__device__ __forceinline__ float op_block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads(); // sh may still be read by a previous reduction
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// op_stored returns v as storage holds it (rounded to bf16 with bf16
// storage): what a kernel that stores v and one that reads it back see.
__device__ __forceinline__ float op_stored(float v) {
#if OP_BF16
  return op_f32(op_bf16(v));
#else
  return v;
#endif
}

// op_e4m3_scale returns the scale of a row whose largest magnitude is a:
// a/448, or 1 for a row of zeros (quant.RowScales).
__device__ __forceinline__ float op_e4m3_scale(float a) { return a == 0.0f ? 1.0f : a / 448.0f; }

// op_store_codes stores the OP_VEC codes c at p in one access (p aligned to
// OP_VEC bytes): the E4M3 codes of one vector of storage elements.
__device__ __forceinline__ void op_store_codes(unsigned char *p, const unsigned char *c) {
#if OP_BF16
  unsigned long long v = 0;
#pragma unroll
  for (int e = 0; e < OP_VEC; e++) v |= (unsigned long long)c[e] << (8 * e);
  *(unsigned long long *)p = v;
#else
  unsigned v = 0;
#pragma unroll
  for (int e = 0; e < OP_VEC; e++) v |= (unsigned)c[e] << (8 * e);
  *(unsigned *)p = v;
#endif
}

// OP_ROW_VECS: the most 16-byte vectors of a row per thread that the
// one-pass E4M3 producers hold in registers (the launcher's rowVecs). A
// row of nv vectors fits a block when nv ≤ OP_ROW_VECS·blockDim; thread t
// holds the vectors t + j·blockDim, j < OP_ROW_VECS, below nv.
#ifndef OP_ROW_VECS
#error "OP_ROW_VECS is set by the Go launcher (-DOP_ROW_VECS=8)"
#endif

// op_row_fits reports whether a row of nv vectors (0: not whole aligned
// vectors) fits this block's registers.
__device__ __forceinline__ bool op_row_fits(int nv) { return nv > 0 && nv <= OP_ROW_VECS * (int)blockDim.x; }

// op_e4m3x2 returns the E4M3 codes of lo (low byte) and hi: op_e4m3 of
// each, in one conversion instruction on sm_89 and later (round to nearest
// even, saturating to ±448, as op_e4m3).
__device__ __forceinline__ unsigned op_e4m3x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
#else
  return op_e4m3(lo) | (unsigned)op_e4m3(hi) << 8;
#endif
}

// op_row_e4m3 is the E4M3 half of a one-pass producer of a row that fits
// (op_row_fits): v[j] holds the thread's vector t + j·blockDim of the row's
// values as storage holds them; it writes the row's scale max |v| / 448 to
// *scale (thread 0) and the codes e4m3(v / scale) to q, as
// op_quant_rows_e4m3 of that row, reading nothing back. sh holds 32 floats
// (it may follow another reduction over the same sh).
__device__ __forceinline__ void op_row_e4m3(const op_vec16 *v, int nv, unsigned char *q, float *scale, float *sh) {
  float a = 0.0f;
#pragma unroll
  for (int j = 0; j < OP_ROW_VECS; j++)
    if ((int)threadIdx.x + j * (int)blockDim.x < nv)
#pragma unroll
      for (int e = 0; e < OP_VEC; e++) a = fmaxf(a, fabsf(op_f32(v[j].e[e])));
  float sc = op_e4m3_scale(op_block_max(a, sh));
  if (threadIdx.x == 0) *scale = sc;
#pragma unroll
  for (int j = 0; j < OP_ROW_VECS; j++) {
    int k = threadIdx.x + j * blockDim.x;
    if (k >= nv) continue;
    unsigned w[OP_VEC / 4];
#pragma unroll
    for (int e = 0; e < OP_VEC; e += 4)
      w[e / 4] = op_e4m3x2(op_f32(v[j].e[e]) / sc, op_f32(v[j].e[e + 1]) / sc) |
                 op_e4m3x2(op_f32(v[j].e[e + 2]) / sc, op_f32(v[j].e[e + 3]) / sc) << 16;
#if OP_BF16
    uint2 u;
    u.x = w[0];
    u.y = w[1];
    *(uint2 *)(q + (long long)k * OP_VEC) = u;
#else
    *(unsigned *)(q + (long long)k * OP_VEC) = w[0];
#endif
  }
}

// op_row_load holds the thread's vectors of row p (op_row_fits(nv)) in v,
// every load issued before any is used.
__device__ __forceinline__ void op_row_load(const op_t *p, int nv, op_vec16 *v) {
#pragma unroll
  for (int j = 0; j < OP_ROW_VECS; j++) {
    int k = threadIdx.x + j * blockDim.x;
    if (k < nv) v[j].u = *(const uint4 *)(p + (long long)k * OP_VEC);
  }
}

// op_row_store writes the thread's vectors v of a row that fits to p.
__device__ __forceinline__ void op_row_store(op_t *p, int nv, const op_vec16 *v) {
#pragma unroll
  for (int j = 0; j < OP_ROW_VECS; j++) {
    int k = threadIdx.x + j * blockDim.x;
    if (k < nv) *(uint4 *)(p + (long long)k * OP_VEC) = v[j].u;
  }
}
