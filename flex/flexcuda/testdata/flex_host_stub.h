// flex_host_stub.h: host stand-ins for the CUDA builtins of the generated flex
// sources, enough for g++ -fsyntax-only to type-check them
// (TestGeneratedSourcesTypeCheck) where no CUDA compiler is present: the
// tensor-op kernels' stand-ins and what the flex sources use beyond them.
// Not a CUDA emulation: nothing here runs; inline PTX is parsed, not checked.
#include "../../../tensor/tensorcuda/testdata/cuda_host_stub.h"
#undef __shared__
#define __shared__ // the flex sources declare extern __shared__ arrays
#define __launch_bounds__(...)
#define __grid_constant__
#define asm __asm__
template <typename T> inline T __shfl_sync(unsigned, T v, int) { return v; }
inline float exp2f(float x) { return exp2(x); }
inline float2 make_float2(float x, float y) { return float2{x, y}; }
