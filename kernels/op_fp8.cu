// op_fp8.cu: activations to OCP FP8 E4M3 with one float32 scale per row
// (per token), the X side of the FP8 GEMM (gpu.GemmFP8 with ScaleRowsCols):
// scales[r] = max_j |x[r][j]| / 448 (1 for a row of zeros; NaNs do not
// count) and codes[r][j] = e4m3(x[r][j] / scales[r]), as package
// tensor/quant's RowScales and QuantizeRows, bit for bit. One block per row.
// Needs only OP_BF16 (nvcc -arch=sm_90 -Xptxas -v -c -DOP_BF16=1 ...).
#include "op_common.cuh"

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
__device__ __forceinline__ float op_block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// op_quant_rows_e4m3: scales[r] and codes[r][0..cols) of row r of x
// (rows × cols, storage dtype), as the file's comment says.
extern "C" __global__ void op_quant_rows_e4m3(const op_t *__restrict__ x, int rows, int cols,
                                              unsigned char *__restrict__ codes,
                                              float *__restrict__ scales) {
  __shared__ float sh[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const op_t *z = x + (long long)r * cols;
  float a = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) a = fmaxf(a, fabsf(op_f32(z[j])));
  a = op_block_max(a, sh);
  float s = a == 0.0f ? 1.0f : a / 448.0f; // IEEE division: RowScales' float32(amax/448)
  if (threadIdx.x == 0) scales[r] = s;
  unsigned char *q = codes + (long long)r * cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) q[j] = op_e4m3(op_f32(z[j]) / s);
}
