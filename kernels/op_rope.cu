// op_rope.cu: rotary position embedding (tensor.Backend's RoPE) in HF's
// rotate_half convention. x and y are [rows, heads, 2·half] storage
// elements; cos and sin are [rows, half] fp32.
#include "op_common.cuh"

// op_rope_pair rotates one pair (a, b) = (x[i], x[i+half]) by c, s (by −angle
// with inverse) into *lo, *hi: overwriting them, or adding to them with
// accumulate.
__device__ __forceinline__ void op_rope_pair(float a, float b, float c, float s,
                                             int inverse, int accumulate,
                                             float *lo, float *hi) {
  float l, h;
  if (inverse) {
    l = a * c + b * s;
    h = b * c - a * s;
  } else {
    l = a * c - b * s;
    h = b * c + a * s;
  }
  *lo = accumulate ? *lo + l : l;
  *hi = accumulate ? *hi + h : h;
}

// op_rope: for each row r, head and i < half, with c = cos[r,i], s = sin[r,i],
// a = x[i], b = x[i+half] (of that head):
//   forward (inverse 0): y[i] = a·c − b·s,  y[i+half] = b·c + a·s;
//   inverse (1, RoPE's gradient): y[i] = a·c + b·s,  y[i+half] = b·c − a·s;
// with accumulate non-zero the result is added to y (read only then).
// With half a whole number of vectors and every pointer aligned, each
// thread rotates OP_VEC pairs at once with 16-byte accesses.
extern "C" __global__ void op_rope(const op_t *__restrict__ x,
                                   const float *__restrict__ cos,
                                   const float *__restrict__ sin,
                                   op_t *__restrict__ y, int rows, int heads,
                                   int half, int inverse, int accumulate) {
  long long total = (long long)rows * heads * half; // pairs
  bool vec = half % OP_VEC == 0 && op_aligned16(x) && op_aligned16(y) &&
             op_aligned16(cos) && op_aligned16(sin);
  int hv = half / OP_VEC;
  long long nv = vec ? total / OP_VEC : 0;
  for (long long v = op_global_id(); v < nv; v += op_global_stride()) {
    long long rh = v / hv; // row·heads + head
    int i = (int)(v - rh * hv) * OP_VEC;
    long long r = rh / heads;
    long long lo = rh * 2 * half + i, hi = lo + half;
    float a[OP_VEC], b[OP_VEC], c[OP_VEC], s[OP_VEC], ylo[OP_VEC], yhi[OP_VEC];
    op_load_vec(x + lo, a);
    op_load_vec(x + hi, b);
    op_load_f32_vec(cos + r * half + i, c);
    op_load_f32_vec(sin + r * half + i, s);
    if (accumulate) {
      op_load_vec(y + lo, ylo);
      op_load_vec(y + hi, yhi);
    }
#pragma unroll
    for (int e = 0; e < OP_VEC; e++) op_rope_pair(a[e], b[e], c[e], s[e], inverse, accumulate, &ylo[e], &yhi[e]);
    op_store_vec(y + lo, ylo);
    op_store_vec(y + hi, yhi);
  }
  for (long long idx = nv * OP_VEC + op_global_id(); idx < total; idx += op_global_stride()) {
    long long rh = idx / half;
    int i = (int)(idx - rh * half);
    long long r = rh / heads;
    float c = cos[r * half + i], s = sin[r * half + i];
    long long lo = rh * 2 * half + i, hi = lo + half;
    float ylo = accumulate ? op_f32(y[lo]) : 0.0f, yhi = accumulate ? op_f32(y[hi]) : 0.0f;
    op_rope_pair(op_f32(x[lo]), op_f32(x[hi]), c, s, inverse, accumulate, &ylo, &yhi);
    op_put(y + lo, ylo);
    op_put(y + hi, yhi);
  }
}
