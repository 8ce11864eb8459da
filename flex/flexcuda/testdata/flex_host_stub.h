// flex_host_stub.h: host stand-ins for the CUDA builtins of the generated flex
// sources, enough for g++ -fsyntax-only to type-check them
// (TestGeneratedSourcesTypeCheck) where no CUDA compiler is present. Not a
// CUDA emulation: nothing here runs; inline PTX is parsed, not checked.
#include <math.h>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
#define asm __asm__
struct dim3s { unsigned x, y, z; };
extern dim3s threadIdx, blockIdx, blockDim, gridDim;
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float2 { float x, y; };
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int) { return v; }
template <typename T> inline T __shfl_sync(unsigned, T v, int) { return v; }
inline void __syncthreads() {}
inline void __syncwarp(unsigned = 0xffffffff) {}
inline float atomicAdd(float *p, float v) { float o = *p; *p += v; return o; }
inline float exp2f(float x) { return exp2(x); }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline unsigned long long __cvta_generic_to_shared(const void *p) { return (unsigned long long)p; }
template <class A, class B> inline auto min(A a, B b) { return a < b ? a : b; }
template <class A, class B> inline auto max(A a, B b) { return a > b ? a : b; }
