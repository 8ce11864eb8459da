// op_copy.cu: strided block copies and the [A,B,C,D] -> [A,C,B,D] transpose
// (tensor.Backend's Copy2D and Transpose12), overwriting or accumulating.
// Both move whole 16-byte vectors when every row start allows it (one index
// computation per vector) and single elements otherwise. Indices are 32-bit
// with op_udiv's divisions below 2³¹ elements, 64-bit above.
#include "op_common.cuh"

// op_move (+)= one unit from s to d: OP_VEC elements in one 16-byte access
// each way when VEC (s and d 16-byte aligned), else one element.
template <bool VEC>
__device__ __forceinline__ void op_move(const op_t *s, op_t *d, bool acc) {
  if constexpr (VEC) {
    if (acc) {
      float a[OP_VEC], b[OP_VEC];
      op_load_vec(d, a);
      op_load_vec(s, b);
#pragma unroll
      for (int k = 0; k < OP_VEC; k++) a[k] += b[k];
      op_store_vec(d, a);
    } else {
      *(uint4 *)d = *(const uint4 *)s;
    }
  } else if (acc) {
    op_put(d, op_f32(*d) + op_f32(*s));
  } else {
    *d = *s;
  }
}

// op_copy2d_body moves n units (rows of w units each) from rows of src
// src_stride elements apart to rows of dst dst_stride apart; I and D are
// the index type and its divider (unsigned and op_udiv, or long long and
// op_ldiv).
template <bool VEC, typename I, typename D>
__device__ __forceinline__ void op_copy2d_body(const op_t *__restrict__ src, long long src_stride,
                                               op_t *__restrict__ dst, long long dst_stride,
                                               I n, int w, bool acc) {
  const int unit = VEC ? OP_VEC : 1;
  D dw(w);
  for (I i = (I)op_global_id(); i < n; i += (I)op_global_stride()) {
    I r = dw.div(i);
    long long c = (long long)(i - r * w) * unit;
    op_move<VEC>(src + (long long)r * src_stride + c, dst + (long long)r * dst_stride + c, acc);
  }
}

// op_copy2d: for r < rows, c < cols:
// dst[r·dst_stride + dst_off + c] (+)= src[r·src_stride + src_off + c],
// adding when accumulate is non-zero. Vectors when cols and (with more than
// one row) both strides are whole vectors and both first elements are
// 16-byte aligned.
extern "C" __global__ void op_copy2d(const op_t *__restrict__ src,
                                     long long src_stride, long long src_off,
                                     op_t *__restrict__ dst,
                                     long long dst_stride, long long dst_off,
                                     int rows, int cols, int accumulate) {
  src += src_off;
  dst += dst_off;
  bool acc = accumulate != 0;
  bool vec = cols % OP_VEC == 0 && (rows == 1 || (src_stride % OP_VEC == 0 && dst_stride % OP_VEC == 0)) &&
             op_aligned16(src) && op_aligned16(dst);
  long long n = (long long)rows * cols;
  if (vec && op_index_small(n))
    op_copy2d_body<true, unsigned, op_udiv>(src, src_stride, dst, dst_stride, (unsigned)(n / OP_VEC), cols / OP_VEC, acc);
  else if (vec)
    op_copy2d_body<true, long long, op_ldiv>(src, src_stride, dst, dst_stride, n / OP_VEC, cols / OP_VEC, acc);
  else if (op_index_small(n))
    op_copy2d_body<false, unsigned, op_udiv>(src, src_stride, dst, dst_stride, (unsigned)n, cols, acc);
  else
    op_copy2d_body<false, long long, op_ldiv>(src, src_stride, dst, dst_stride, n, cols, acc);
}

// op_transpose12_body moves the n units of dst [na, nc, nb, w] (in order)
// from src [na, nb, nc, w], w units per d-run; I and D as op_copy2d_body's.
template <bool VEC, typename I, typename D>
__device__ __forceinline__ void op_transpose12_body(const op_t *__restrict__ src, op_t *__restrict__ dst,
                                                    I n, int nb, int nc, int w, bool acc) {
  const int unit = VEC ? OP_VEC : 1;
  D dw(w), db(nb), dc(nc);
  for (I o = (I)op_global_id(); o < n; o += (I)op_global_stride()) {
    I t = dw.div(o);   // (a·nc + c)·nb + b
    I t2 = db.div(t);  // a·nc + c
    I a = dc.div(t2);
    I d = o - t * w, b = t - t2 * nb, c = t2 - a * nc;
    I s = ((a * nb + b) * nc + c) * w + d;
    op_move<VEC>(src + (long long)s * unit, dst + (long long)o * unit, acc);
  }
}

// op_transpose12: dst[a,c,b,d] (+)= src[a,b,c,d] for src [na,nb,nc,nd],
// adding when accumulate is non-zero. Threads walk dst in order, a vector
// of a d-run at a time when nd is whole vectors and both pointers are
// 16-byte aligned (a d-run is contiguous in both layouts).
extern "C" __global__ void op_transpose12(const op_t *__restrict__ src,
                                          op_t *__restrict__ dst, int na,
                                          int nb, int nc, int nd,
                                          int accumulate) {
  bool acc = accumulate != 0;
  bool vec = nd % OP_VEC == 0 && op_aligned16(src) && op_aligned16(dst);
  long long n = (long long)na * nb * nc * nd;
  if (vec && op_index_small(n))
    op_transpose12_body<true, unsigned, op_udiv>(src, dst, (unsigned)(n / OP_VEC), nb, nc, nd / OP_VEC, acc);
  else if (vec)
    op_transpose12_body<true, long long, op_ldiv>(src, dst, n / OP_VEC, nb, nc, nd / OP_VEC, acc);
  else if (op_index_small(n))
    op_transpose12_body<false, unsigned, op_udiv>(src, dst, (unsigned)n, nb, nc, nd, acc);
  else
    op_transpose12_body<false, long long, op_ldiv>(src, dst, n, nb, nc, nd, acc);
}
