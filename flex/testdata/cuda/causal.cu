// flex mask program "causal", structural hash 09dc9cd90e659f419b59839dad87784daf24a29ba1e356d2e315b8cd388cef85
// (q >= kv)
#ifndef FLEX_HELPERS
#define FLEX_HELPERS
__device__ __forceinline__ int flex_clamp(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }
__device__ __forceinline__ int flex_div(int a, int b) { return b == 0 ? 0 : (b == -1 ? -a : a / b); }
__device__ __forceinline__ int flex_mod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
__device__ __forceinline__ int flex_abs(int a) { return a < 0 ? -a : a; }
#endif
__device__ __forceinline__ bool mask_fn(int b, int h, int q, int kv) {
  const int t0 = q;
  const int t1 = kv;
  const bool t2 = t0 >= t1;
  return t2;
}
