// cuda_host_stub.h: host stand-ins for the CUDA builtins the tensor-op kernels
// (kernels/op_*.cu) use, enough for g++ -fsyntax-only to type-check them
// (TestOpKernelsTypeCheck), and for the host harnesses to run them
// (TestOpKernelsOnHost, whose host_grid.h defines the grid variables,
// __syncthreads and __shfl_xor_sync). Not a CUDA emulation.
#include <math.h>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static
struct dim3s { unsigned x, y, z; };
extern thread_local dim3s threadIdx; // each of a block's threads may be a thread of its own
extern dim3s blockIdx, blockDim, gridDim;
void __syncthreads();
inline void __syncwarp(unsigned = 0xffffffff) {}
inline unsigned long long __cvta_generic_to_shared(const void *p) { return (unsigned long long)p; }
#define __align__(n) __attribute__((aligned(n)))
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float2 { float x, y; };
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
// Defined by host_grid.h for the host harnesses (an exchange among a block's
// threads run together); the type check needs only the declaration.
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask);
template <typename T> T __shfl_sync(unsigned mask, T v, int src_lane);
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline float __double2float_rn(double a) { return (float)a; }
inline float atomicAdd(float *p, float v) { float o = *p; *p += v; return o; }

inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
template <class A, class B> inline auto min(A a, B b) { return a < b ? a : b; }
template <class A, class B> inline auto max(A a, B b) { return a > b ? a : b; }
