// op_rope.cu: rotary position embedding (tensor.Backend's RoPE) in HF's
// rotate_half convention. x and y are [rows, heads, 2·half] storage
// elements; cos and sin are [rows, half] fp32.
#include "op_common.cuh"

// op_rope: for each row r, head and i < half, with c = cos[r,i], s = sin[r,i],
// a = x[i], b = x[i+half] (of that head):
//   forward (inverse 0): y[i] = a·c − b·s,  y[i+half] = b·c + a·s;
//   inverse (1, RoPE's gradient): y[i] += a·c + b·s,  y[i+half] += b·c − a·s.
extern "C" __global__ void op_rope(const op_t *__restrict__ x,
                                   const float *__restrict__ cos,
                                   const float *__restrict__ sin,
                                   op_t *__restrict__ y, int rows, int heads,
                                   int half, int inverse) {
  long long total = (long long)rows * heads * half;
  for (long long idx = op_global_id(); idx < total; idx += op_global_stride()) {
    long long rh = idx / half; // row·heads + head
    int i = (int)(idx - rh * half);
    long long r = rh / heads;
    float c = cos[r * half + i], s = sin[r * half + i];
    long long lo = rh * 2 * half + i, hi = lo + half;
    float a = op_f32(x[lo]), b = op_f32(x[hi]);
    if (inverse) {
      op_put(y + lo, op_f32(y[lo]) + (a * c + b * s));
      op_put(y + hi, op_f32(y[hi]) + (b * c - a * s));
    } else {
      op_put(y + lo, a * c - b * s);
      op_put(y + hi, b * c + a * s);
    }
  }
}
