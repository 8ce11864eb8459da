// op_copy.cu: strided block copies and the [A,B,C,D] -> [A,C,B,D] transpose
// (tensor.Backend's Copy2D and Transpose12), overwriting or accumulating.
#include "op_common.cuh"

// op_copy2d: for r < rows, c < cols:
// dst[r·dst_stride + dst_off + c] (+)= src[r·src_stride + src_off + c],
// adding when accumulate is non-zero.
extern "C" __global__ void op_copy2d(const op_t *__restrict__ src,
                                     long long src_stride, long long src_off,
                                     op_t *__restrict__ dst,
                                     long long dst_stride, long long dst_off,
                                     int rows, int cols, int accumulate) {
  long long total = (long long)rows * cols;
  for (long long i = op_global_id(); i < total; i += op_global_stride()) {
    long long r = i / cols, c = i - r * cols;
    const op_t *s = src + r * src_stride + src_off + c;
    op_t *d = dst + r * dst_stride + dst_off + c;
    if (accumulate)
      op_put(d, op_f32(*d) + op_f32(*s));
    else
      *d = *s;
  }
}

// op_transpose12: dst[a,c,b,d] (+)= src[a,b,c,d] for src [na,nb,nc,nd],
// adding when accumulate is non-zero. Threads walk dst in order.
extern "C" __global__ void op_transpose12(const op_t *__restrict__ src,
                                          op_t *__restrict__ dst, int na,
                                          int nb, int nc, int nd,
                                          int accumulate) {
  long long total = (long long)na * nb * nc * nd;
  for (long long o = op_global_id(); o < total; o += op_global_stride()) {
    long long t = o / nd;
    int d = (int)(o - t * nd);
    long long t2 = t / nb;
    int b = (int)(t - t2 * nb);
    long long a = t2 / nc;
    int c = (int)(t2 - a * nc);
    long long s = ((a * nb + b) * nc + c) * nd + d;
    if (accumulate)
      op_put(dst + o, op_f32(dst[o]) + op_f32(src[s]));
    else
      dst[o] = src[s];
  }
}
