// flex mask program "prefixlm", structural hash d7e723a476bb4bd79ad572485ca0844428bf8cc6a5b60a0f28571ca42f06dd1a
// ((kv <= q) || (kv < prefix_len[b]))
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
