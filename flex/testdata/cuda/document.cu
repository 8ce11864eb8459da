// flex mask program "document", structural hash bdcf73007a3e93e39f2ce1472836eaec17486af19a1cb128a9b2964e6981e8e2
// (doc_ids[b, q] == doc_ids[b, kv])
#ifndef FLEX_HELPERS
#define FLEX_HELPERS
__device__ __forceinline__ int flex_clamp(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }
__device__ __forceinline__ int flex_div(int a, int b) { return b == 0 ? 0 : (b == -1 ? -a : a / b); }
__device__ __forceinline__ int flex_mod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }
__device__ __forceinline__ int flex_abs(int a) { return a < 0 ? -a : a; }
#endif
__device__ __forceinline__ bool mask_fn(int b, int h, int q, int kv, const int* __restrict__ doc_ids, int doc_ids_d0, int doc_ids_d1) {
  const int t0 = b;
  const int t1 = q;
  const int t2 = doc_ids[(flex_clamp(t0, doc_ids_d0)) * doc_ids_d1 + flex_clamp(t1, doc_ids_d1)];
  const int t3 = kv;
  const int t4 = doc_ids[(flex_clamp(t0, doc_ids_d0)) * doc_ids_d1 + flex_clamp(t3, doc_ids_d1)];
  const bool t5 = t2 == t4;
  return t5;
}
