// flex score program "relbias8" (backward), structural hash 08a8c0603d6bd16b64605cb57089004a6e7ac72e2ba73d695e8cd961688c13c0
// (score + rel_bias[h, (min(max((q - kv), -8), 8) + 8)])
#ifndef FLEX_HELPERS
#define FLEX_HELPERS
__device__ __forceinline__ int flex_clamp(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }
__device__ __forceinline__ int flex_tdiv(int a, int b) { return b == 0 ? 0 : (b == -1 ? (int)(0u - (unsigned)a) : a / b); }
__device__ __forceinline__ int flex_tmod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
__device__ __forceinline__ int flex_fdiv(int a, int b) { return flex_tdiv(a, b) - ((b != 0 && b != -1 && a % b != 0 && (a < 0) != (b < 0)) ? 1 : 0); }
__device__ __forceinline__ int flex_fmod(int a, int b) { int r = flex_tmod(a, b); return (r != 0 && (r < 0) != (b < 0)) ? r + b : r; }
__device__ __forceinline__ int flex_abs(int a) { return a < 0 ? -a : a; }
__device__ __forceinline__ int flex_shl(int a, int s) { return (int)((unsigned)a << (s < 0 ? 0 : (s > 31 ? 31 : s))); }
__device__ __forceinline__ int flex_shr(int a, int s) { return a >> (s < 0 ? 0 : (s > 31 ? 31 : s)); }
__device__ __forceinline__ int flex_f2i(float x) { return x != x ? 0 : (x >= 2147483648.0f ? 2147483647 : (x <= -2147483648.0f ? (-2147483647 - 1) : (int)x)); }
__device__ __forceinline__ float flex_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
#endif
__device__ __forceinline__ float score_bwd(float score, float g, int b, int h, int q, int kv, const float* __restrict__ rel_bias, int rel_bias_d0, int rel_bias_d1, float* __restrict__ rel_bias_grad) {
  const float t0 = score;
  const int t1 = h;
  const int t2 = q;
  const int t3 = kv;
  const int t4 = t2 - t3;
  const int t5 = (-8);
  const int t6 = max(t4, t5);
  const int t7 = 8;
  const int t8 = min(t6, t7);
  const int t9 = t8 + t7;
  const float t10 = rel_bias[(flex_clamp(t1, rel_bias_d0)) * rel_bias_d1 + flex_clamp(t9, rel_bias_d1)];
  const float t11 = t0 + t10;
  float a0 = 0.0f;
  float a10 = 0.0f;
  float a11 = 0.0f;
  a11 = g;
  a0 += a11;
  a10 += a11;
  if (a10 != 0.0f) atomicAdd(&rel_bias_grad[(flex_clamp(t1, rel_bias_d0)) * rel_bias_d1 + flex_clamp(t9, rel_bias_d1)], a10);
  return a0;
}
