// op_adamw.cu: one fused AdamW step over a flat fp32 parameter buffer
// (master weights p, gradient g, moments m and v, all fp32), writing the bf16
// compute copy of the updated weights too. The arithmetic is train/adamw.go's,
// in float64, operation for operation, with explicitly rounded intrinsics so
// that no multiply-add is contracted: the result equals the CPU optimizer's.
// It does not depend on OP_BF16.
#include "op_common.cuh"

// op_adamw: segment k = blockIdx.y of the table seg (three int64 per segment:
// start, end, decays) is updated by the blocks of grid x in a grid-stride
// loop. For each element j, with shrink = 1 − lr·wd where the segment decays
// and 1 where it does not (step_size = lr/(1 − b1^t), bc2_sqrt = sqrt(1 − b2^t)
// computed by the caller as train.AdamW does):
//   w = p·shrink
//   m = b1·m + (1−b1)·g,  v = b2·v + (1−b2)·g·g     (stored as fp32)
//   p = w − step_size·m / (sqrt(v)/bc2_sqrt + eps)  (stored as fp32)
//   p16 = bf16(p) when p16 is not null.
extern "C" __global__ void op_adamw(float *__restrict__ p,
                                    const float *__restrict__ g,
                                    float *__restrict__ m,
                                    float *__restrict__ v,
                                    unsigned short *__restrict__ p16,
                                    const long long *__restrict__ seg,
                                    double b1, double b2, double eps,
                                    double step_size, double bc2_sqrt,
                                    double shrink) {
  long long lo = seg[3 * blockIdx.y], hi = seg[3 * blockIdx.y + 1];
  double sh = seg[3 * blockIdx.y + 2] ? shrink : 1.0;
  double c1 = __dsub_rn(1.0, b1), c2 = __dsub_rn(1.0, b2);
  for (long long j = lo + op_global_id(); j < hi; j += op_global_stride()) {
    double gj = (double)g[j];
    double w = __dmul_rn((double)p[j], sh);
    float mf = __double2float_rn(__dadd_rn(__dmul_rn(b1, (double)m[j]), __dmul_rn(c1, gj)));
    float vf = __double2float_rn(__dadd_rn(__dmul_rn(b2, (double)v[j]), __dmul_rn(__dmul_rn(c2, gj), gj)));
    m[j] = mf;
    v[j] = vf;
    double den = __dadd_rn(__ddiv_rn(__dsqrt_rn((double)vf), bc2_sqrt), eps);
    w = __dsub_rn(w, __ddiv_rn(__dmul_rn(step_size, (double)mf), den));
    float wf = __double2float_rn(w);
    p[j] = wf;
    if (p16) p16[j] = op_bf16(wf);
  }
}
