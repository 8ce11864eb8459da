// op_swiglu_host.cc: runs kernels/op_swiglu.cu's packed kernels on the host
// (TestOpKernelsOnHost) and compares them, bit for bit, with the unfused
// op_swiglu_fwd and op_swiglu_bwd run on the two halves of each row copied
// apart: on the vector path (cols a multiple of a vector, aligned), the
// scalar path (odd cols, or y2 off alignment), accumulating, written, and
// written over y2 itself.
#include "host_grid.h"

static void test_packed(long long rows, int cols, int shift, unsigned blocks) {
  long long n = rows * cols;
  buffer y2(2 * n, shift), dout(n, 0), base(2 * n, 0), out(n, 0), dy2(2 * n, shift), inplace(2 * n, shift);
  buffer gate(n, 0), up(n, 0), want(n, 0), dg(n, 0), du(n, 0), dgAcc(n, 0), duAcc(n, 0);
  for (long long r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      long long i = r * cols + c, j = 2 * r * cols + c;
      gate.p[i] = y2.p[j], up.p[i] = y2.p[j + cols];
      dgAcc.p[i] = base.p[j], duAcc.p[i] = base.p[j + cols];
    }
  for (long long i = 0; i < 2 * n; i++) dy2.p[i] = base.p[i], inplace.p[i] = y2.p[i];
  grid(1, 64, [&] { op_swiglu_fwd(gate.p, up.p, want.p, n); });
  grid(1, 64, [&] { op_swiglu_bwd(gate.p, up.p, dout.p, dg.p, du.p, n, 0); });
  grid(1, 64, [&] { op_swiglu_bwd(gate.p, up.p, dout.p, dgAcc.p, duAcc.p, n, 1); });
  grid(blocks, 64, [&] { op_swiglu_packed_fwd(y2.p, out.p, rows, cols); });
  grid(blocks, 64, [&] { op_swiglu_packed_bwd(y2.p, dout.p, dy2.p, rows, cols, 1); });
  for (long long i = 0; i < n; i++) {
    checks++;
    if (!same(out.p[i], want.p[i])) {
      FAIL("op_swiglu_packed_fwd %lldx%d shift %d grid %u: element %lld = %g, want %g\n", rows, cols, shift, blocks, i,
           op_f32(out.p[i]), op_f32(want.p[i]));
      return;
    }
  }
  // check compares a packed gradient with the unfused halves g and u.
  auto check = [&](const char *what, const op_t *got, const op_t *g, const op_t *u) {
    for (long long r = 0; r < rows; r++)
      for (int c = 0; c < cols; c++) {
        long long i = r * cols + c, j = 2 * r * cols + c;
        checks++;
        if (!same(got[j], g[i]) || !same(got[j + cols], u[i])) {
          FAIL("op_swiglu_packed_bwd %s %lldx%d shift %d grid %u: row %lld col %d = %g, %g, want %g, %g\n", what, rows,
               cols, shift, blocks, r, c, op_f32(got[j]), op_f32(got[j + cols]), op_f32(g[i]), op_f32(u[i]));
          return;
        }
      }
  };
  check("accumulated", dy2.p, dgAcc.p, duAcc.p);
  grid(blocks, 64, [&] { op_swiglu_packed_bwd(y2.p, dout.p, dy2.p, rows, cols, 0); });
  check("written", dy2.p, dg.p, du.p);
  grid(blocks, 64, [&] { op_swiglu_packed_bwd(inplace.p, dout.p, inplace.p, rows, cols, 0); });
  check("in place", inplace.p, dg.p, du.p);
}

int main() {
  const int v = OP_VEC;
  for (unsigned blocks : {1u, 3u, 100u})
    for (long long rows : {1ll, 5ll})
      for (int cols : {1, 7, v, 8 * v, 8 * v + 3}) {
        test_packed(rows, cols, 0, blocks);
        test_packed(rows, cols, 1, blocks);
      }
  return finish();
}
