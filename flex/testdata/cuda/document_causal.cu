// flex mask program "document_causal", structural hash 16b88031984ad9e8de30587175eb504449bb01fab23265db70b2024231f38822
// ((doc_ids[b, q] == doc_ids[b, kv]) && (q >= kv))
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
__device__ __forceinline__ bool mask_fn(int b, int h, int q, int kv, const int* __restrict__ doc_ids, int doc_ids_d0, int doc_ids_d1) {
  const int t0 = b;
  const int t1 = q;
  const int t2 = doc_ids[(flex_clamp(t0, doc_ids_d0)) * doc_ids_d1 + flex_clamp(t1, doc_ids_d1)];
  const int t3 = kv;
  const int t4 = doc_ids[(flex_clamp(t0, doc_ids_d0)) * doc_ids_d1 + flex_clamp(t3, doc_ids_d1)];
  const bool t5 = t2 == t4;
  const bool t6 = t1 >= t3;
  const bool t7 = t5 && t6;
  return t7;
}
