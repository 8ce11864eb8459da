// op_rmsnorm_host.cc: runs kernels/op_rmsnorm.cu's kernels on the host
// (TestOpKernelsOnHost), against float64:
//   - the small-dim kernels with one lane per row, every thread of a grid
//     in turn (then op_group_sum does no shuffle and the kernels have no
//     barrier: what the device computes with lanes = 1): the rows'
//     grid-stride walk, the vector and scalar loops, rstd, y and dx, written
//     over NaN and accumulated; the butterfly over several lanes is left to
//     the GPU tests;
//   - the backward's block kernels with a block's threads run together
//     (their block sums shuffle and wait at barriers): op_rmsnorm_bwd_dx (a
//     block per row), op_rmsnorm_bwd (dx and dw in one pass, a block per
//     chunk of rows) and op_rmsnorm_bwd_dw's vector path, at two block
//     sizes, with its scalar path run thread by thread: dx and the dw chunk
//     sums against float64, and bit for bit where two kernels add the same
//     terms in the same order (the two dx kernels at one block size; the
//     fused kernel's dw and the scalar path's).
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

// dx_start returns n elements for dx to start from: random values to add
// to with acc, NaN (elements not written show) without.
static buffer dx_start(const buffer &from, long long n, int shift, int acc) {
  buffer b(n, shift);
  for (long long i = 0; i < n; i++) b.p[i] = acc ? from.p[i] : element(NAN);
  return b;
}

// check_dx compares dx with want (float64) element by element.
static bool check_dx(const char *what, const op_t *dx, const std::vector<double> &want) {
  for (size_t i = 0; i < want.size(); i++) {
    checks++;
    if (!close(op_f32(dx[i]), want[i], 1, tolOut)) {
      FAIL("%s: dx[%zu] = %g, want %g\n", what, i, op_f32(dx[i]), want[i]);
      return false;
    }
  }
  return true;
}

// check_dw compares the chunk sums of dw with want (float64; sums of per
// fp32 terms).
static bool check_dw(const char *what, const std::vector<float> &partial, const std::vector<double> &want, int per) {
  for (size_t i = 0; i < want.size(); i++) {
    checks++;
    if (!close(partial[i], want[i], 1, tolF32 * per * 4)) {
      FAIL("%s: dw partial %zu = %g, want %g\n", what, i, partial[i], want[i]);
      return false;
    }
  }
  return true;
}

// test_bwd runs the backward's block kernels over rows × dim, dw in chunks
// of per rows; x, dy and dx start shift elements past a 16-byte boundary.
static void test_bwd(int rows, int dim, int per, int shift, int acc) {
  long long n = (long long)rows * dim;
  int chunks = (rows + per - 1) / per, nv = dim / OP_VEC;
  buffer x(n, shift), w(dim, 0), dy(n, shift), dx0(n, shift);
  std::vector<float> rstd(rows);
  std::vector<double> wdx(n), wdw((long long)chunks * dim);
  for (int r = 0; r < rows; r++) {
    const op_t *xr = x.p + (long long)r * dim, *dyr = dy.p + (long long)r * dim;
    double ss = 0, dot = 0;
    for (int c = 0; c < dim; c++) ss += (double)op_f32(xr[c]) * op_f32(xr[c]);
    rstd[r] = (float)(1 / std::sqrt(ss / dim + 1e-6));
    double rs = rstd[r];
    for (int c = 0; c < dim; c++) dot += (double)op_f32(dyr[c]) * op_f32(w.p[c]) * op_f32(xr[c]);
    for (int c = 0; c < dim; c++) {
      long long i = (long long)r * dim + c;
      double d = op_f32(dyr[c]), v = op_f32(xr[c]);
      wdx[i] = (acc ? op_f32(dx0.p[i]) : 0) + rs * (d * op_f32(w.p[c]) - v * rs * (dot * rs / dim));
      wdw[(long long)(r / per) * dim + c] += d * v * rs;
    }
  }
  bool vec = shift == 0 && dim % OP_VEC == 0; // the fused kernel's and the dw vector path's condition
  // The launcher's block for op_rmsnorm_bwd (whole warps, OP_NORM_VECS
  // vectors each); the dx kernel runs with it too, to compare bits.
  unsigned bt = vec ? ((nv + OP_NORM_VECS - 1) / OP_NORM_VECS + 31) / 32 * 32 : 32;
  char what[160];
  std::snprintf(what, sizeof what, "backward rows %d dim %d per %d shift %d acc %d", rows, dim, per, shift, acc);

  buffer dxa = dx_start(dx0, n, shift, acc);
  for (int r = 0; r < rows; r++)
    block_together(rows, 1, r, 0, bt, [&] { op_rmsnorm_bwd_dx(x.p, w.p, rstd.data(), dy.p, dxa.p, rows, dim, acc); });
  if (!check_dx(what, dxa.p, wdx)) return;

  std::vector<float> ps((long long)chunks * dim, NAN); // the scalar path, thread by thread
  grid2d((unsigned)(dim + 31) / 32, (unsigned)chunks, 32,
         [&] { op_rmsnorm_bwd_dw(x.p, rstd.data(), dy.p, ps.data(), rows, dim, per, 0); });
  if (!check_dw(what, ps, wdw, per) || !vec) return;

  // The vector path at the launcher's 256 threads (a block spans the row
  // when it has at most 256 vectors) and at 32 (blocks of 32 vectors);
  // once, as dw does not depend on acc.
  for (unsigned threads : {256u, 32u}) {
    if (acc) break;
    std::vector<float> pv((long long)chunks * dim, NAN);
    unsigned gx = (nv + threads - 1) / threads;
    for (unsigned by = 0; by < (unsigned)chunks; by++)
      for (unsigned bx = 0; bx < gx; bx++)
        block_together(gx, chunks, bx, by, threads, [&] { op_rmsnorm_bwd_dw(x.p, rstd.data(), dy.p, pv.data(), rows, dim, per, 1); });
    char vwhat[200];
    std::snprintf(vwhat, sizeof vwhat, "%s, dw vector path of %u threads", what, threads);
    if (!check_dw(vwhat, pv, wdw, per)) return;
  }

  buffer dxf = dx_start(dx0, n, shift, acc);
  std::vector<float> pf((long long)chunks * dim, NAN);
  for (int k = 0; k < chunks; k++)
    block_together(chunks, 1, k, 0, bt, [&] { op_rmsnorm_bwd(x.p, w.p, rstd.data(), dy.p, dxf.p, pf.data(), rows, dim, per, acc); });
  char fwhat[200];
  std::snprintf(fwhat, sizeof fwhat, "%s, fused kernel of %u threads", what, bt);
  if (!check_dx(fwhat, dxf.p, wdx) || !check_dw(fwhat, pf, wdw, per)) return;
  for (long long i = 0; i < n; i++) {
    checks++;
    if (!same(dxf.p[i], dxa.p[i])) {
      FAIL("%s: dx[%lld] = %g, op_rmsnorm_bwd_dx's %g\n", fwhat, i, op_f32(dxf.p[i]), op_f32(dxa.p[i]));
      return;
    }
  }
  for (long long i = 0; i < (long long)chunks * dim; i++) {
    checks++;
    if (std::memcmp(&pf[i], &ps[i], 4) != 0) {
      FAIL("%s: dw partial %lld = %a, the scalar path's %a\n", fwhat, i, pf[i], ps[i]);
      return;
    }
  }
}

int main() {
  for (int shift = 0; shift < 2; shift++)
    for (unsigned blocks : {1u, 3u, 1000u})
      for (int dim : {1, 7, 64, 100, 128, 256, 1024})
        for (int rows : {1, 33, 200})
          for (int acc = 0; acc < 2; acc++) test_rows(rows, dim, shift, blocks, acc);
  const int v = OP_VEC;
  // Vectors per row: one, a few, two per thread of a warp (OP_NORM_VECS),
  // past that (blocks of two and three warps); 7 and 100 are not whole
  // vectors in bf16 (100 is in fp32). Chunks of 4 rows: 5, the last of 3.
  for (int shift = 0; shift < 2; shift++)
    for (int acc = 0; acc < 2; acc++)
      for (int dim : {7, 100, v, 5 * v, 64 * v, 71 * v, 129 * v})
        for (auto [rows, per] : {std::pair{1, 16}, {19, 4}}) test_bwd(rows, dim, per, shift, acc);
  return finish();
}
