// op_ew_host.cc: runs kernels/op_ew.cu's op_add on the host
// (TestOpKernelsOnHost): a grid-stride loop with no barrier or shuffle, so
// running every (block, thread) of a grid in turn computes what the device
// computes. Each result is compared, bit for bit, with a plain loop over the
// same formula (one rounding to storage per element), on the vector path
// (aligned buffers), the scalar path (one buffer off alignment) and in place.
#include "host_grid.h"

static void test_add(long long n, int shiftA, int shiftB, int shiftOut, bool inPlace, unsigned blocks) {
  buffer a(n, shiftA), b(n, shiftB), out(n, shiftOut);
  op_t *dst = inPlace ? a.p : out.p;
  std::vector<op_t> want(n);
  for (long long i = 0; i < n; i++) op_put(&want[i], op_f32(a.p[i]) + op_f32(b.p[i]));
  grid(blocks, 64, [&] { op_add(a.p, b.p, dst, n); });
  for (long long i = 0; i < n; i++) {
    checks++;
    if (!same(dst[i], want[i])) {
      FAIL("op_add n %lld shifts %d/%d/%d in place %d grid %u: element %lld = %g, want %g\n", n, shiftA, shiftB,
           shiftOut, inPlace, blocks, i, op_f32(dst[i]), op_f32(want[i]));
      return;
    }
  }
}

int main() {
  const int v = OP_VEC;
  for (unsigned blocks : {1u, 3u, 1000u})
    for (long long n : {1ll, 7ll, (long long)v, 64ll * v, 5000ll * v + 3})
      for (int in = 0; in < 2; in++) {
        test_add(n, 0, 0, 0, in, blocks);
        test_add(n, 0, 1, 0, in, blocks);
        test_add(n, 1, 1, 1, in, blocks);
        test_add(n, 0, 0, 1, in, blocks);
      }
  return finish();
}
