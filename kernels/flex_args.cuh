// flex_args.cuh: the run-time argument block of the flex mask and score
// programs and the programs themselves, as the kernels call them:
//
//   bool  flex_mask(const FlexArgs &A, int b, int h, int q, int kv)
//   float flex_score(const FlexArgs &A, float s, int b, int h, int q, int kv)
//   float flex_score_grad(const FlexArgs &A, float s, float g, int b, int h, int q, int kv)
//
// Included by flex_common.cuh (the attention kernels) and by
// flex_blockmask.cu (the block-mask builder), which needs nothing else.
#pragma once

// FlexArgs is the run-time argument block of the mask and score programs:
// FLEX_NARGS 8-byte slots that arrive as separate kernel parameters
// (FLEX_ARG_PARAMS) so that any launcher passing 8-byte values can fill them.
// The generator (package flex/flexcuda) lays them out: device pointers of the
// tensors first, then int scalars, tensor dimensions and float scalars packed
// two 32-bit words per slot (low word first), then, in the backward only, the
// gradient pointers of float tensors read by the score program.
#ifndef FLEX_NARGS
#error "flex_args.cuh: FLEX_NARGS (and FLEX_ARG_PARAMS, FLEX_ARG_VALUES) come from the generator (flex/flexcuda)"
#endif
#if FLEX_NARGS == 0
#define FLEX_ARG_PARAMS
#define FLEX_ARG_VALUES 0ull
#endif
struct FlexArgs {
  unsigned long long s[FLEX_NARGS > 0 ? FLEX_NARGS : 1];
};
// flex_lo and flex_hi read the low and high 32-bit words of slot i.
#define flex_lo(A, i) ((int)(unsigned)((A).s[i]))
#define flex_hi(A, i) ((int)(unsigned)((A).s[i] >> 32))

// @flex-program-begin (the generator replaces this block with the programs)
#ifndef FLEX_PROGRAM_DEFINED
// Default programs: a causal mask with bottom-right alignment off (kv <= q)
// and the identity score. Generated code replaces this block.
__device__ __forceinline__ bool flex_mask(const FlexArgs &A, int b, int h,
                                          int q, int kv) {
  return kv <= q;
}
__device__ __forceinline__ float flex_score(const FlexArgs &A, float s, int b,
                                            int h, int q, int kv) {
  return s;
}
// flex_score_grad returns g * d score'/d s (and adds the gradients of the
// score program's float tensors); the identity's derivative is 1.
__device__ __forceinline__ float flex_score_grad(const FlexArgs &A, float s,
                                                 float g, int b, int h, int q,
                                                 int kv) {
  return g;
}
#endif
// @flex-program-end
