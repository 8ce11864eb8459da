// flex score program "softcap30", structural hash e889d1cbbc906c864739479078a13cbfd9ff80e067e05af5c994d457c4bb50a8
// (30 * tanh((score / 30)))
#ifndef FLEX_HELPERS
#define FLEX_HELPERS
__device__ __forceinline__ int flex_clamp(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }
__device__ __forceinline__ int flex_div(int a, int b) { return b == 0 ? 0 : (b == -1 ? -a : a / b); }
__device__ __forceinline__ int flex_mod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
__device__ __forceinline__ int flex_abs(int a) { return a < 0 ? -a : a; }
#endif
__device__ __forceinline__ float score_fn(float score, int b, int h, int q, int kv) {
  const float t0 = (30.0f);
  const float t1 = score;
  const float t2 = t1 / t0;
  const float t3 = tanhf(t2);
  const float t4 = t0 * t3;
  return t4;
}
