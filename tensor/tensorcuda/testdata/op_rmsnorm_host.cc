// op_rmsnorm_host.cc: runs kernels/op_rmsnorm.cu's small-dim kernels on the
// host (TestOpKernelsOnHost) with one lane per row: then op_group_sum does
// no shuffle and the kernels have no barrier, so running every thread of a
// grid in turn computes what the device computes with lanes = 1. It checks
// the rows' grid-stride walk, the vector and scalar loops and the formulas
// against float64, dx both written over NaN and accumulated; the butterfly
// over several lanes is left to the GPU tests.
#include "host_grid.h"
#include <cmath>

// The GPU tests' tolerances: outputs in storage dtype, fp32 statistics.
static const double tolOut = OP_BF16 ? 1e-2 : 3e-5, tolF32 = 3e-5;

// close reports whether got is within tol of want relative to
// max(|want|, floor) (false for NaN: an element not written).
static bool close(double got, double want, double floor, double tol) {
  return std::fabs(got - want) / std::max(std::fabs(want), floor) <= tol;
}

static void test_rows(int rows, int dim, int shift, unsigned blocks, int acc) {
  long long n = (long long)rows * dim;
  const float eps = 1e-6f;
  buffer x(n, shift), w(dim, 0), y(n, 0), dy(n, 0), dx(n, shift);
  std::vector<float> rstd(rows);
  for (long long i = 0; i < n; i++) y.p[i] = element(NAN);
  if (!acc)
    for (long long i = 0; i < n; i++) dx.p[i] = element(NAN);
  std::vector<op_t> dx0(dx.p, dx.p + n);
  grid(blocks, 64, [&] { op_rmsnorm_fwd_small(x.p, w.p, y.p, rstd.data(), rows, dim, eps, 1); });
  grid(blocks, 64, [&] { op_rmsnorm_bwd_dx_small(x.p, w.p, rstd.data(), dy.p, dx.p, rows, dim, 1, acc); });
  for (int r = 0; r < rows; r++) {
    const op_t *xr = x.p + (long long)r * dim, *dyr = dy.p + (long long)r * dim;
    double ss = 0, dot = 0;
    for (int c = 0; c < dim; c++) {
      double v = op_f32(xr[c]);
      ss += v * v;
      dot += op_f32(dyr[c]) * (double)op_f32(w.p[c]) * v;
    }
    double rs = 1 / std::sqrt(ss / dim + eps), grs = rstd[r];
    checks++;
    if (!close(grs, rs, 0, tolF32)) {
      FAIL("rows %d dim %d shift %d grid %u: rstd[%d] = %g, want %g\n", rows, dim, shift, blocks, r, grs, rs);
      return;
    }
    double m = dot * grs / dim; // dx is checked against the device's rstd, as the backward reads it
    for (int c = 0; c < dim; c++) {
      long long i = (long long)r * dim + c;
      double v = op_f32(xr[c]), wc = op_f32(w.p[c]);
      double wy = v * rs * wc, wdx = (acc ? op_f32(dx0[i]) : 0) + grs * (op_f32(dyr[c]) * wc - v * grs * m);
      checks += 2;
      if (!close(op_f32(y.p[i]), wy, 1, tolOut) || !close(op_f32(dx.p[i]), wdx, 1, tolOut)) {
        FAIL("rows %d dim %d shift %d grid %u acc %d: row %d col %d: y %g want %g, dx %g want %g\n", rows, dim,
             shift, blocks, acc, r, c, op_f32(y.p[i]), wy, op_f32(dx.p[i]), wdx);
        return;
      }
    }
  }
}

int main() {
  for (int shift = 0; shift < 2; shift++)
    for (unsigned blocks : {1u, 3u, 1000u})
      for (int dim : {1, 7, 64, 100, 128, 256, 1024})
        for (int rows : {1, 33, 200})
          for (int acc = 0; acc < 2; acc++) test_rows(rows, dim, shift, blocks, acc);
  return finish();
}
