// op_norm_rope_host.cc: runs kernels/op_norm_rope.cu's kernels on the host
// (TestOpKernelsOnHost). The row kernels run with one lane per head row:
// then op_group_sum does no shuffle and they have no barrier, so running
// every thread of a grid in turn computes what the device computes with
// lanes = 1; the dw kernel has neither. Each result is checked against
// float64: the forward (rstd and y in the [batch, heads, length, D] layout),
// dx (written over NaN, and accumulated onto random values) and the dw
// chunk sums, with and without a norm weight, on the vector and the scalar
// paths, with x and dx dense and strided (rows heads·dim + pad apart: the
// elements between dx's rows must keep their bits).
#include "host_grid.h"
#include <cmath>

// The GPU tests' tolerances: outputs in storage dtype, fp32 statistics.
static const double tolOut = OP_BF16 ? 1e-2 : 3e-5, tolF32 = 3e-5;

static bool close(double got, double want, double floor, double tol) {
  return std::fabs(got - want) / std::max(std::fabs(want), floor) <= tol;
}

// table is n random fp32 values (angles' cos or sin) at a 16-byte boundary.
struct table {
  std::vector<float4> storage;
  float *p;
  explicit table(long long n) : storage(n / 4 + 2) {
    p = (float *)storage.data();
    std::uniform_real_distribution<float> u(-1, 1);
    for (long long i = 0; i < n; i++) p[i] = u(rng);
  }
};

static void test_norm_rope(int batch, int length, int heads, int half, int pad, bool weight, int shift,
                           unsigned blocks, int acc) {
  int dim = 2 * half, stride = heads * dim + pad;
  long long rows = (long long)batch * length * heads, n = rows * dim;
  long long span = (long long)(batch * length - 1) * stride + heads * dim;
  const float eps = 1e-6f;
  buffer x(span, shift), w(dim, 0), y(n, 0), dy(n, shift), dx(span, shift);
  table cs(batch * length * half), sn(batch * length * half);
  std::vector<float> rstd(rows, NAN);
  for (long long i = 0; i < n; i++) y.p[i] = element(NAN);
  if (!acc)
    for (long long i = 0; i < span; i++) dx.p[i] = element(NAN);
  std::vector<op_t> dx0(dx.p, dx.p + span);
  const op_t *wp = weight ? w.p : nullptr;
  grid(blocks, 64, [&] { op_norm_rope_fwd(x.p, wp, cs.p, sn.p, y.p, rstd.data(), batch, length, heads, half, stride, eps, 1); });
  grid(blocks, 64, [&] {
    op_norm_rope_bwd_dx(weight ? x.p : nullptr, wp, rstd.data(), cs.p, sn.p, dy.p, dx.p, batch, length, heads, half, stride, 1, acc);
  });
  const int per = 5, chunks = (int)((rows + per - 1) / per);
  std::vector<float> partial((long long)chunks * dim, NAN);
  if (weight) {
    grid2d((unsigned)((dim + 31) / 32), (unsigned)chunks, 32, [&] {
      op_norm_rope_bwd_dw(x.p, rstd.data(), cs.p, sn.p, dy.p, partial.data(), batch, length, heads, half, stride, per, 0);
    });
  }
  // The vector path (the launcher's choice when vectors fit): blocks of 256
  // threads run together, their groups' sums added in shared memory.
  std::vector<float> vpartial((long long)chunks * dim, NAN);
  bool vec = weight && half % OP_VEC == 0 && stride % OP_VEC == 0 && shift == 0;
  if (vec) {
    for (unsigned by = 0; by < (unsigned)chunks; by++)
      block_together(1, chunks, 0, by, 256, [&] {
        op_norm_rope_bwd_dw(x.p, rstd.data(), cs.p, sn.p, dy.p, vpartial.data(), batch, length, heads, half, stride, per, 1);
      });
  }
  std::vector<double> dw(dim * (long long)chunks);
  char what[200];
  std::snprintf(what, sizeof what, "[%d,%d,%d,%d] pad %d weight %d shift %d grid %u acc %d", batch, length, heads,
                2 * half, pad, weight, shift, blocks, acc);
  std::vector<bool> in_row(span);
  for (long long i = 0; i < rows; i++) {
    long long r = i / heads, h = i % heads, b = r / length, l = r % length;
    long long o = ((b * heads + h) * length + l) * dim;
    long long xo = r * stride + h * dim;
    const op_t *xr = x.p + xo;
    double rs = 1, grs = 1;
    if (weight) {
      double ss = 0;
      for (int c = 0; c < dim; c++) ss += (double)op_f32(xr[c]) * op_f32(xr[c]);
      rs = 1 / std::sqrt(ss / dim + eps), grs = rstd[i];
      checks++;
      if (!close(grs, rs, 0, tolF32)) {
        FAIL("%s: rstd[%lld] = %g, want %g\n", what, i, grs, rs);
        return;
      }
    }
    std::vector<double> z(dim), g(dim);
    for (int c = 0; c < dim; c++) z[c] = op_f32(xr[c]) * rs * (weight ? op_f32(w.p[c]) : 1.0);
    double dot = 0; // Σ g·w·x̂ with the device's rstd, as the backward reads it
    for (int k = 0; k < half; k++) {
      double c = cs.p[r * half + k], s = sn.p[r * half + k];
      double wy[2] = {z[k] * c - z[k + half] * s, z[k + half] * c + z[k] * s};
      double a = op_f32(dy.p[o + k]), bb = op_f32(dy.p[o + k + half]);
      g[k] = a * c + bb * s, g[k + half] = bb * c - a * s;
      for (int e = 0; e < 2; e++) {
        checks++;
        double got = op_f32(y.p[o + k + e * half]);
        if (!close(got, wy[e], 1, tolOut)) {
          FAIL("%s: head row %lld col %d: y %g, want %g\n", what, i, k + e * half, got, wy[e]);
          return;
        }
      }
    }
    for (int c = 0; c < dim; c++)
      if (weight) {
        double xh = op_f32(xr[c]) * grs;
        dot += g[c] * op_f32(w.p[c]) * xh;
        dw[(i / per) * dim + c] += g[c] * xh;
      }
    for (int c = 0; c < dim; c++) {
      double want = g[c];
      if (weight) want = grs * (g[c] * op_f32(w.p[c]) - op_f32(xr[c]) * grs * dot / dim);
      if (acc) want += op_f32(dx0[xo + c]);
      checks++;
      in_row[xo + c] = true;
      if (!close(op_f32(dx.p[xo + c]), want, 1, tolOut)) {
        FAIL("%s: head row %lld col %d: dx %g, want %g\n", what, i, c, op_f32(dx.p[xo + c]), want);
        return;
      }
    }
  }
  for (long long k = 0; k < span; k++) {
    if (in_row[k]) continue;
    checks++;
    if (!same(dx.p[k], dx0[k])) {
      FAIL("%s: dx[%lld] between rows was changed\n", what, k);
      return;
    }
  }
  if (!weight) return;
  for (long long k = 0; k < (long long)chunks * dim; k++) {
    checks++;
    if (!close(partial[k], dw[k], 1, tolF32 * per * 4)) {
      FAIL("%s: dw partial %lld = %g, want %g\n", what, k, partial[k], dw[k]);
      return;
    }
    if (vec && (checks++, !close(vpartial[k], dw[k], 1, tolF32 * per * 4))) {
      FAIL("%s: dw partial %lld of the vector path = %g, want %g\n", what, k, vpartial[k], dw[k]);
      return;
    }
  }
}

int main() {
  const int v = OP_VEC;
  for (int weight = 0; weight < 2; weight++)
    for (int shift = 0; shift < 2; shift++)
      for (unsigned blocks : {1u, 3u, 1000u})
        for (int acc = 0; acc < 2; acc++) {
          for (int pad : {0, 1, 2 * v}) { // dense; strided on the scalar path; strided on whole vectors
            test_norm_rope(1, 1, 1, 1, pad, weight, shift, blocks, acc);
            test_norm_rope(2, 5, 3, 7, pad, weight, shift, blocks, acc);     // odd half: scalar pairs
            test_norm_rope(2, 3, 4, 8 * v, pad, weight, shift, blocks, acc); // whole vectors (the 128 of Qwen3 in bf16)
            test_norm_rope(1, 7, 2, v, pad, weight, shift, blocks, acc);
            test_norm_rope(3, 1, 5, 2 * v + 1, pad, weight, shift, blocks, acc);
          }
        }
  return finish();
}
