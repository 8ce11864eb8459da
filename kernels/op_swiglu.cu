// op_swiglu.cu: SwiGLU forward and backward (tensor.Backend's SwiGLU and
// SwiGLUBackward), elementwise over n storage elements.
#include "op_common.cuh"

__device__ __forceinline__ float op_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// op_swiglu_fwd: out = silu(gate)·up with silu(g) = g·σ(g).
extern "C" __global__ void op_swiglu_fwd(const op_t *__restrict__ gate,
                                         const op_t *__restrict__ up,
                                         op_t *__restrict__ out, long long n) {
  for (long long i = op_global_id(); i < n; i += op_global_stride()) {
    float g = op_f32(gate[i]);
    op_put(out + i, g * op_sigmoid(g) * op_f32(up[i]));
  }
}

// op_swiglu_bwd: dgate += dout·up·σ(g)·(1 + g·(1−σ(g))) and
// dup += dout·silu(g); a null dgate or dup is skipped.
extern "C" __global__ void op_swiglu_bwd(const op_t *__restrict__ gate,
                                         const op_t *__restrict__ up,
                                         const op_t *__restrict__ dout,
                                         op_t *__restrict__ dgate,
                                         op_t *__restrict__ dup, long long n) {
  for (long long i = op_global_id(); i < n; i += op_global_stride()) {
    float g = op_f32(gate[i]), d = op_f32(dout[i]);
    float s = op_sigmoid(g);
    if (dgate) op_put(dgate + i, op_f32(dgate[i]) + d * op_f32(up[i]) * s * (1.0f + g * (1.0f - s)));
    if (dup) op_put(dup + i, op_f32(dup[i]) + d * g * s);
  }
}
