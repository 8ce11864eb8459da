// op_ew.cu: elementwise vector updates (tensor.Backend's Add, Axpy, AxpyBy,
// Scale and Fill) over n elements, 16 bytes per access where aligned
// (op_common.cuh's vectorised loops). The _to_f32 and _from_f32 axpys add
// between storage and fp32 buffers (bf16 activation gradients and fp32
// parameter gradients or partial sums).
#include "op_common.cuh"

// op_vec_io loads and stores OP_VEC elements of a storage or an fp32 buffer
// as fp32 (with fp32 storage both are the same).
template <typename T> struct op_vec_io;
template <> struct op_vec_io<float> {
  static __device__ __forceinline__ void load(const float *p, float *f) { op_load_f32_vec(p, f); }
  static __device__ __forceinline__ void store(float *p, const float *f) { op_store_f32_vec(p, f); }
};
#if OP_BF16
template <> struct op_vec_io<op_t> {
  static __device__ __forceinline__ void load(const op_t *p, float *f) { op_load_vec(p, f); }
  static __device__ __forceinline__ void store(op_t *p, const float *f) { op_store_vec(p, f); }
};
#endif

// op_axpy_body: y += a·x over n elements, x and y each in storage dtype or
// fp32, rounding y once per element (the body of every axpy kernel).
template <typename TX, typename TY>
__device__ __forceinline__ void op_axpy_body(float a, const TX *__restrict__ x, TY *__restrict__ y,
                                             long long n) {
  long long nv = op_aligned16(x) && op_aligned16(y) ? n / OP_VEC : 0;
  for (long long v = op_global_id(); v < nv; v += op_global_stride()) {
    float xs[OP_VEC], ys[OP_VEC];
    op_vec_io<TX>::load(x + v * OP_VEC, xs);
    op_vec_io<TY>::load(y + v * OP_VEC, ys);
#pragma unroll
    for (int k = 0; k < OP_VEC; k++) ys[k] += a * xs[k];
    op_vec_io<TY>::store(y + v * OP_VEC, ys);
  }
  for (long long i = nv * OP_VEC + op_global_id(); i < n; i += op_global_stride())
    op_put(y + i, op_f32(y[i]) + a * op_f32(x[i]));
}

// op_axpy: y += alpha·x.
extern "C" __global__ void op_axpy(float alpha, const op_t *__restrict__ x,
                                   op_t *__restrict__ y, long long n) {
  op_axpy_body(alpha, x, y, n);
}

// op_add: out = a + b, rounding once per element (out may be a or b).
extern "C" __global__ void op_add(const op_t *a, const op_t *b, op_t *out, long long n) {
  long long nv = op_aligned16(a) && op_aligned16(b) && op_aligned16(out) ? n / OP_VEC : 0;
  for (long long v = op_global_id(); v < nv; v += op_global_stride()) {
    float as[OP_VEC], bs[OP_VEC];
    op_load_vec(a + v * OP_VEC, as);
    op_load_vec(b + v * OP_VEC, bs);
#pragma unroll
    for (int k = 0; k < OP_VEC; k++) as[k] += bs[k];
    op_store_vec(out + v * OP_VEC, as);
  }
  for (long long i = nv * OP_VEC + op_global_id(); i < n; i += op_global_stride())
    op_put(out + i, op_f32(a[i]) + op_f32(b[i]));
}

// op_scale: x *= alpha.
extern "C" __global__ void op_scale(float alpha, op_t *__restrict__ x, long long n) {
  long long nv = op_aligned16(x) ? n / OP_VEC : 0;
  for (long long v = op_global_id(); v < nv; v += op_global_stride()) {
    float xs[OP_VEC];
    op_load_vec(x + v * OP_VEC, xs);
#pragma unroll
    for (int k = 0; k < OP_VEC; k++) xs[k] *= alpha;
    op_store_vec(x + v * OP_VEC, xs);
  }
  for (long long i = nv * OP_VEC + op_global_id(); i < n; i += op_global_stride())
    op_put(x + i, alpha * op_f32(x[i]));
}

// op_scalar returns alpha·s[0], or alpha when s is null: the factor of the
// axpys below, whose optional scalar s is an fp32 value on the device (a
// loss's gradient, which the host never reads).
__device__ __forceinline__ float op_scalar(float alpha, const float *s) {
  return s ? alpha * s[0] : alpha;
}

// op_axpy_by: y += alpha·s[0]·x (storage x and y, fp32 s).
extern "C" __global__ void op_axpy_by(float alpha, const float *__restrict__ s,
                                      const op_t *__restrict__ x,
                                      op_t *__restrict__ y, long long n) {
  op_axpy_body<op_t, op_t>(op_scalar(alpha, s), x, y, n);
}

// op_axpy_to_f32: y += alpha·s[0]·x with x in storage dtype and y fp32 (s
// may be null: factor alpha). A bf16 gradient added into an fp32 one.
extern "C" __global__ void op_axpy_to_f32(float alpha, const float *__restrict__ s,
                                          const op_t *__restrict__ x,
                                          float *__restrict__ y, long long n) {
  op_axpy_body<op_t, float>(op_scalar(alpha, s), x, y, n);
}

// op_axpy_from_f32: y += alpha·s[0]·x with x fp32 and y in storage dtype (s
// may be null), rounding once per element: an fp32 partial result added
// into a bf16 gradient.
extern "C" __global__ void op_axpy_from_f32(float alpha, const float *__restrict__ s,
                                            const float *__restrict__ x,
                                            op_t *__restrict__ y, long long n) {
  op_axpy_body<float, op_t>(op_scalar(alpha, s), x, y, n);
}

// op_fill: x[i] = v (rounded to storage once).
extern "C" __global__ void op_fill(op_t *__restrict__ x, float v, long long n) {
  op_t e;
  op_put(&e, v);
  long long nv = op_aligned16(x) ? n / OP_VEC : 0;
  op_vec16 w;
#pragma unroll
  for (int k = 0; k < OP_VEC; k++) w.e[k] = e;
  for (long long i = op_global_id(); i < nv; i += op_global_stride())
    *(uint4 *)(x + i * OP_VEC) = w.u;
  for (long long i = nv * OP_VEC + op_global_id(); i < n; i += op_global_stride())
    x[i] = e;
}
