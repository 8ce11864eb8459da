// op_skinny.cu: the products of decoding, y = alpha·x·Wᵀ + beta·c for a
// few rows x (m ≤ 16, row-major m×k) against a weight W stored n×k
// row-major (HF's out×in), bf16 storage, fp32 accumulation on tensor cores
// (mma.sync m16n8k16). Such a product reads W once and does 2m FLOPs per
// weight: it is bound by memory, and a GEMM library's tiles of 64 or more
// rows leave most of the machine idle on it. Here each warp streams its 32
// rows of W in 16-byte loads, one per lane and 32 columns of k, and the
// warps of a block split k and add their partial sums in a fixed order
// (the result does not depend on the schedule).
//
// The k order inside a tile is permuted, the same for x and W (a dot
// product does not care): lane (g, t) = (lane/4, lane%4) loads the 8
// consecutive values 8t..8t+7 of a 32-column chunk, and the two mma.sync
// of the chunk take values 8t+{0,1,2,3} and 8t+{4,5,6,7} where the
// instruction's layout puts columns 2t, 2t+1, 2t+8, 2t+9. So every load is
// 16 bytes and whole sectors are read.
//
// Needs k a multiple of 32 and 16-byte aligned rows (checked by the Go
// launcher, which otherwise runs cuBLASLt). Standalone build:
//   nvcc -arch=sm_90 -Xptxas -v -c -DOP_BF16=1 -DOP_ROW_VECS=8 -DOP_SK_MAX_WARPS=16 kernels/op_skinny.cu
#include "op_common.cuh"

#ifndef OP_SK_MAX_WARPS
#error "OP_SK_MAX_WARPS is set by the Go launcher (-DOP_SK_MAX_WARPS=16)"
#endif

#define SK_COLS 32 // output columns (rows of W) per block: 4 tiles of 8

// op_skinny_gemm: block b computes columns b·32.. of y (m×n, row stride
// ldc) with blockDim.x/32 warps; warp w takes the 32-column chunks w,
// w + warps, ... of k. Rows of x past m and of W past n read as zeros.
// c may be y (beta·c read first); beta = 0 reads no c.
extern "C" __global__ void op_skinny_gemm(const op_t *__restrict__ x, int ldx, const op_t *__restrict__ w, int ldw,
               const op_t *c, op_t *y, int ldc, int m, int n, int k, float alpha, float beta) {
#if OP_BF16
  __shared__ float red[OP_SK_MAX_WARPS][32][16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * SK_COLS;
  float acc[16];
#pragma unroll
  for (int i = 0; i < 16; i++) acc[i] = 0.0f;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const op_t *x0 = x + (long long)g * ldx + t * 8, *x1 = x + (long long)(g + 8) * ldx + t * 8;
  const bool has0 = g < m, has1 = g + 8 < m;
  const op_t *wr[4];
  bool hw[4];
#pragma unroll
  for (int j = 0; j < 4; j++) {
    int row = n0 + j * 8 + g;
    hw[j] = row < n;
    wr[j] = w + (long long)(hw[j] ? row : 0) * ldw + t * 8;
  }
  const int chunks = k / 32;
#pragma unroll 4
  for (int ch = warp; ch < chunks; ch += warps) {
    const int kk = ch * 32;
    uint4 wv[4];
#pragma unroll
    for (int j = 0; j < 4; j++) wv[j] = hw[j] ? *reinterpret_cast<const uint4 *>(wr[j] + kk) : zero;
    const uint4 xa = has0 ? *reinterpret_cast<const uint4 *>(x0 + kk) : zero;
    const uint4 xb = has1 ? *reinterpret_cast<const uint4 *>(x1 + kk) : zero;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      op_mma_bf16(acc + 4 * j, xa.x, xb.x, xa.y, xb.y, wv[j].x, wv[j].y);
      op_mma_bf16(acc + 4 * j, xa.z, xb.z, xa.w, xb.w, wv[j].z, wv[j].w);
    }
  }
#pragma unroll
  for (int i = 0; i < 16; i++) red[warp][lane][i] = acc[i];
  __syncthreads();
  // Value v of the block's 512: lane v/16's accumulator v%16, tile j =
  // (v%16)/4, register r = v%4 at row g (+8 for r ≥ 2), column 2t + r%2.
  for (int v = threadIdx.x; v < 32 * 16; v += blockDim.x) {
    const int ln = v >> 4, i = v & 15, j = i >> 2, r = i & 3;
    const int row = (ln >> 2) + (r >= 2 ? 8 : 0), col = n0 + j * 8 + (ln & 3) * 2 + (r & 1);
    if (row >= m || col >= n) continue;
    float s = 0.0f;
    for (int q = 0; q < warps; q++) s += red[q][ln][i];
    s *= alpha;
    const long long at = (long long)row * ldc + col;
    if (beta != 0.0f) s += beta * op_f32(c[at]);
    op_put(y + at, s);
  }
#endif
}
