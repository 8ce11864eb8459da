// flex score program "relbias8" (backward), structural hash 846682e2d518c53f38dd8643fa41573e4e9582b294dd0df8a6c9ceb8cb746bea
// (score + rel_bias[h, (min(max((q - kv), -8), 8) + 8)])
#ifndef FLEX_HELPERS
#define FLEX_HELPERS
__device__ __forceinline__ int flex_clamp(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }
__device__ __forceinline__ int flex_div(int a, int b) { return b == 0 ? 0 : (b == -1 ? -a : a / b); }
__device__ __forceinline__ int flex_mod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
__device__ __forceinline__ int flex_abs(int a) { return a < 0 ? -a : a; }
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
