// flex mask program "prefixlm", structural hash e87bbf9136eae9919278253101d45508f8ff7e70bfea30b260bc2d35dd61ed6c
// ((kv <= q) || (kv < prefix_len[b]))
#ifndef FLEX_HELPERS
#define FLEX_HELPERS
__device__ __forceinline__ int flex_clamp(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }
__device__ __forceinline__ int flex_div(int a, int b) { return b == 0 ? 0 : (b == -1 ? -a : a / b); }
__device__ __forceinline__ int flex_mod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
__device__ __forceinline__ int flex_abs(int a) { return a < 0 ? -a : a; }
#endif
__device__ __forceinline__ bool mask_fn(int b, int h, int q, int kv, const int* __restrict__ prefix_len, int prefix_len_d0) {
  const int t0 = kv;
  const int t1 = q;
  const bool t2 = t0 <= t1;
  const int t3 = b;
  const int t4 = prefix_len[flex_clamp(t3, prefix_len_d0)];
  const bool t5 = t0 < t4;
  const bool t6 = t2 || t5;
  return t6;
}
