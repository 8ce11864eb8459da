// op_fp8.cu: activations to OCP FP8 E4M3 with one float32 scale per row
// (per token), the X side of the FP8 GEMM (gpu.GemmFP8 with ScaleRowsCols):
// scales[r] = max_j |x[r][j]| / 448 (1 for a row of zeros; NaNs do not
// count) and codes[r][j] = e4m3(x[r][j] / scales[r]), as package
// tensor/quant's RowScales and QuantizeRows, bit for bit. One block per row.
// op_e4m3 and op_block_max are in op_common.cuh; RMSNorm and SwiGLU write
// E4M3 rows the same way (op_rmsnorm_e4m3, op_swiglu_packed_e4m3).
// Needs only OP_BF16 and OP_ROW_VECS (nvcc -arch=sm_90 -Xptxas -v -c
// -DOP_BF16=1 -DOP_ROW_VECS=8 ...).
#include "op_common.cuh"

// op_quant_rows_e4m3: scales[r] and codes[r][0..cols) of row r of x
// (rows × cols, storage dtype), as the file's comment says. A row that
// fits the block's registers (op_row_fits) is read once in 16-byte vectors;
// a larger or unaligned one element by element, twice.
extern "C" __global__ void op_quant_rows_e4m3(const op_t *__restrict__ x, int rows, int cols,
                                              unsigned char *__restrict__ codes,
                                              float *__restrict__ scales) {
  __shared__ float sh[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const op_t *z = x + (long long)r * cols;
  unsigned char *q = codes + (long long)r * cols;
  int nv = cols % OP_VEC == 0 && op_aligned16(x) && op_aligned16(codes) ? cols / OP_VEC : 0;
  if (op_row_fits(nv)) {
    op_vec16 v[OP_ROW_VECS];
    op_row_load(z, nv, v);
    op_row_e4m3(v, nv, q, scales + r, sh);
    return;
  }
  float a = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) a = fmaxf(a, fabsf(op_f32(z[j])));
  a = op_block_max(a, sh);
  float s = op_e4m3_scale(a); // IEEE division: RowScales' float32(amax/448)
  if (threadIdx.x == 0) scales[r] = s;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) q[j] = op_e4m3(op_f32(z[j]) / s);
}
