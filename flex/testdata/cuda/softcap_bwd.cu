// flex score program "softcap" (backward), structural hash 69e0c4969ce426f9c67b2432c6a1fc3ac3291416b0d630ec1113ca0c8b9c1389
// ($softcap * tanh((score / $softcap)))
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
