// op_copy_host.cc: runs kernels/op_copy.cu's kernels and op_common.cuh's
// op_udiv on the host (TestOpKernelsOnHost), appended to the spliced source
// after cuda_host_stub.h. The copy kernels are grid-stride loops with no
// barrier or shuffle, so running every (block, thread) of a grid in turn
// computes what the device computes; each result is compared with a plain
// loop over the same formula.
#include "host_grid.h"

static void test_udiv() {
  std::vector<unsigned> ds = {1, 2, 3, 5, 7, 12, 16, 31, 32, 33, 96, 128, 3072, 65535, 65536, 65537,
                              (1u << 30) - 1, 1u << 30, (1u << 30) + 1, (1u << 31) - 1, 1u << 31};
  for (int i = 0; i < 200; i++) ds.push_back(1 + (unsigned)(rng() % (1u << 31)));
  for (int i = 0; i < 200; i++) ds.push_back(1 + (unsigned)(rng() % 5000));
  for (unsigned d : ds) {
    op_udiv f(d);
    std::vector<unsigned> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, 0x7fffffffu, 0x80000000u, 0xffffffffu, 0xfffffffeu};
    for (int i = 0; i < 2000; i++) ns.push_back((unsigned)rng());
    for (int i = 0; i < 200; i++) {
      unsigned long long q = rng() % (0xffffffffull / d + 1);
      ns.push_back((unsigned)(q * d));
      if (q * d > 0) ns.push_back((unsigned)(q * d - 1));
    }
    for (unsigned n : ns) {
      checks++;
      if (f.div(n) != n / d) FAIL("op_udiv(%u).div(%u) = %u, want %u\n", d, n, f.div(n), n / d);
    }
  }
}

static void test_copy2d(int rows, int cols, long long ss, long long so, long long ds, long long dof, int shift,
                        bool acc, unsigned blocks) {
  long long sn = (rows - 1) * ss + so + cols, dn = (rows - 1) * ds + dof + cols;
  buffer src(sn, shift), dst(dn, shift);
  std::vector<op_t> want(dst.p, dst.p + dn);
  for (long long r = 0; r < rows; r++)
    for (long long c = 0; c < cols; c++) {
      op_t s = src.p[r * ss + so + c];
      op_t &d = want[r * ds + dof + c];
      if (acc)
        op_put(&d, op_f32(d) + op_f32(s));
      else
        d = s;
    }
  grid(blocks, 64, [&] { op_copy2d(src.p, ss, so, dst.p, ds, dof, rows, cols, acc); });
  for (long long i = 0; i < dn; i++) {
    checks++;
    if (!same(dst.p[i], want[i])) {
      FAIL("op_copy2d rows %d cols %d src %lld+%lld dst %lld+%lld shift %d acc %d: element %lld differs\n", rows,
           cols, ss, so, ds, dof, shift, acc, i);
      return;
    }
  }
}

static void test_transpose12(int na, int nb, int nc, int nd, int shift, bool acc, unsigned blocks) {
  long long n = (long long)na * nb * nc * nd;
  buffer src(n, shift), dst(n, shift);
  std::vector<op_t> want(dst.p, dst.p + n);
  for (long long a = 0; a < na; a++)
    for (long long b = 0; b < nb; b++)
      for (long long c = 0; c < nc; c++)
        for (long long d = 0; d < nd; d++) {
          op_t s = src.p[((a * nb + b) * nc + c) * nd + d];
          op_t &o = want[((a * nc + c) * nb + b) * nd + d];
          if (acc)
            op_put(&o, op_f32(o) + op_f32(s));
          else
            o = s;
        }
  grid(blocks, 64, [&] { op_transpose12(src.p, dst.p, na, nb, nc, nd, acc); });
  for (long long i = 0; i < n; i++) {
    checks++;
    if (!same(dst.p[i], want[i])) {
      FAIL("op_transpose12 [%d,%d,%d,%d] shift %d acc %d: element %lld differs\n", na, nb, nc, nd, shift, acc, i);
      return;
    }
  }
}

int main() {
  test_udiv();
  const int v = OP_VEC;
  for (int acc = 0; acc < 2; acc++)
    for (int shift = 0; shift < 2; shift++)
      for (unsigned blocks : {1u, 3u, 1000u}) {
        test_copy2d(1, 1, 1, 0, 1, 0, shift, acc, blocks);
        test_copy2d(1, 5000 * v, 0, 0, 0, 0, shift, acc, blocks);          // one long row
        test_copy2d(1, 5000 * v + 3, 0, 0, 0, 0, shift, acc, blocks);      // odd cols
        test_copy2d(1, 64 * v, 0, v, 0, 2 * v, shift, acc, blocks);         // whole-vector offsets
        test_copy2d(33, 8 * v, 8 * v, 0, 24 * v, 16 * v, shift, acc, blocks); // strided rows, vectors
        test_copy2d(33, 8 * v, 8 * v + 1, 0, 24 * v, 0, shift, acc, blocks);  // an odd stride
        test_copy2d(17, 4 * v, 12 * v, 1, 5 * v, v, shift, acc, blocks);     // an odd offset
        test_copy2d(7, 3, 5, 2, 9, 6, shift, acc, blocks);
        test_copy2d(100, 7, 20, 13, 7, 0, shift, acc, blocks);
        test_transpose12(1, 1, 1, 1, shift, acc, blocks);
        test_transpose12(2, 3, 5, 7, shift, acc, blocks);
        test_transpose12(4, 17, 3, 128, shift, acc, blocks);
        test_transpose12(2, 30, 8, 16 * v, shift, acc, blocks);
        test_transpose12(3, 5, 7, v, shift, acc, blocks);
        test_transpose12(2, 9, 4, v + 1, shift, acc, blocks);
      }
  return finish();
}
