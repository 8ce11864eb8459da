// flex score program "alibi" (backward), structural hash 90e890d9af71b392076c384fc24cd87e206f45dfac5ec24d74ec3e96662dcb7a
// (score + (alibi_slopes[h] * float((kv - q))))
#ifndef FLEX_HELPERS
#define FLEX_HELPERS
__device__ __forceinline__ int flex_clamp(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }
__device__ __forceinline__ int flex_div(int a, int b) { return b == 0 ? 0 : (b == -1 ? -a : a / b); }
__device__ __forceinline__ int flex_mod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
__device__ __forceinline__ int flex_abs(int a) { return a < 0 ? -a : a; }
#endif
__device__ __forceinline__ float score_bwd(float score, float g, int b, int h, int q, int kv, const float* __restrict__ alibi_slopes, int alibi_slopes_d0, float* __restrict__ alibi_slopes_grad) {
  const float t0 = score;
  const int t1 = h;
  const float t2 = alibi_slopes[flex_clamp(t1, alibi_slopes_d0)];
  const int t3 = kv;
  const int t4 = q;
  const int t5 = t3 - t4;
  const float t6 = (float)t5;
  const float t7 = t2 * t6;
  const float t8 = t0 + t7;
  float a0 = 0.0f;
  float a2 = 0.0f;
  float a7 = 0.0f;
  float a8 = 0.0f;
  a8 = g;
  a0 += a8;
  a7 += a8;
  a2 += a7 * t6;
  if (a2 != 0.0f) atomicAdd(&alibi_slopes_grad[flex_clamp(t1, alibi_slopes_d0)], a2);
  return a0;
}
