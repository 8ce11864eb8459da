// flex mask program "dflash16", structural hash 47325d3eee91d47d9e5daa982c37ff0b8225d0157df8cce701746606c6fe84e7
// (((q / 16) < num_valid[b]) && ((((kv < $ctx_len) && (kv >= block_starts[b, (q / 16)])) && (kv < anchors[b, (q / 16)])) || ((kv >= $ctx_len) && (((kv - $ctx_len) / 16) == (q / 16)))))
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
__device__ __forceinline__ bool mask_fn(int b, int h, int q, int kv, const int* __restrict__ anchors, int anchors_d0, int anchors_d1, const int* __restrict__ block_starts, int block_starts_d0, int block_starts_d1, int ctx_len, const int* __restrict__ num_valid, int num_valid_d0) {
  const int t0 = q;
  const int t1 = 16;
  const int t2 = t0 >> 4;
  const int t3 = b;
  const int t4 = num_valid[flex_clamp(t3, num_valid_d0)];
  const bool t5 = t2 < t4;
  const int t6 = kv;
  const int t7 = ctx_len;
  const bool t8 = t6 < t7;
  const int t9 = block_starts[(flex_clamp(t3, block_starts_d0)) * block_starts_d1 + flex_clamp(t2, block_starts_d1)];
  const bool t10 = t6 >= t9;
  const bool t11 = t8 && t10;
  const int t12 = anchors[(flex_clamp(t3, anchors_d0)) * anchors_d1 + flex_clamp(t2, anchors_d1)];
  const bool t13 = t6 < t12;
  const bool t14 = t11 && t13;
  const bool t15 = t6 >= t7;
  const int t16 = t6 - t7;
  const int t17 = t16 >> 4;
  const bool t18 = t17 == t2;
  const bool t19 = t15 && t18;
  const bool t20 = t14 || t19;
  const bool t21 = t5 && t20;
  return t21;
}
