// flex mask program "window64", structural hash 6a25bc3860643e6d2497e6ac0538761870422431d465d81bb55e09d4d448215b
// ((q >= kv) && ((q - kv) < 64))
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
  const int t3 = t0 - t1;
  const int t4 = 64;
  const bool t5 = t3 < t4;
  const bool t6 = t2 && t5;
  return t6;
}
