// flex score program "softcap" (backward), structural hash ed9246e6d5f487d2f010285b11fc7d7e040763d0416715eb6f482ad7f2ea6411
// ($softcap * tanh((score / $softcap)))
#ifndef FLEX_HELPERS
#define FLEX_HELPERS
__device__ __forceinline__ int flex_clamp(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }
__device__ __forceinline__ int flex_div(int a, int b) { return b == 0 ? 0 : (b == -1 ? -a : a / b); }
__device__ __forceinline__ int flex_mod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
__device__ __forceinline__ int flex_abs(int a) { return a < 0 ? -a : a; }
#endif
__device__ __forceinline__ float score_bwd(float score, float g, int b, int h, int q, int kv, float softcap) {
  const float t0 = softcap;
  const float t1 = score;
  const float t2 = t1 / t0;
  const float t3 = tanhf(t2);
  const float t4 = t0 * t3;
  float a1 = 0.0f;
  float a2 = 0.0f;
  float a3 = 0.0f;
  float a4 = 0.0f;
  a4 = g;
  a3 += a4 * t0;
  a2 += a3 * (1.0f - t3 * t3);
  a1 += a2 / t0;
  return a1;
}
