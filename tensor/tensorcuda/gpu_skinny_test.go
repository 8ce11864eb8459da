package tensorcuda

import (
	"fmt"
	"os"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
	"dflash/tensor/backendtest"
)

// TestGPUSkinnyGemm compares decoding's products on op_skinny_gemm (bf16,
// x·Wᵀ, 1..16 rows) with the float64 brute force on the bf16 values: every
// row count, columns that fill a block and that do not (8, 40, 1000), k
// of one chunk and of many (32, 96, 4096), x with a padded row stride, and
// alpha·x·Wᵀ + beta·C with C a separate matrix and C the output
// (GemmAdd's residual add in place).
func TestGPUSkinnyGemm(t *testing.T) {
	rng := testseed.New(t)
	gputest.OnBackend(t, NewBackend, func(_ *gpu.Device, b *Backend) error {
		o := b.ops(dtype.BF16)
		for _, k := range []int{32, 96, 4096} {
			for _, n := range []int{8, 40, 1000} {
				for m := 1; m <= skMaxRows; m++ {
					lda := k + 8*(m%2) // odd row counts: a padded row stride
					for _, c := range []struct {
						alpha, beta float32
						inPlace     bool
					}{{1, 0, false}, {0.5, 1, false}, {1, 1, true}} {
						xs, xv := uploadRounded(b, normals(rng, m*lda))
						ws, wv := uploadRounded(b, normals(rng, n*k))
						cs, cv := uploadRounded(b, normals(rng, m*n))
						ys := cs
						if !c.inPlace {
							ys = b.AllocOut(m * n)
						}
						X, W, C, Y := b.buf(xs, "x"), b.buf(ws, "w"), b.buf(cs, "c"), b.buf(ys, "y")
						if !o.skinny(dtype.BF16, false, true, m, n, k, X.Buffer(), lda, W.Buffer(), k) {
							return fmt.Errorf("m %d n %d k %d: not a skinny product", m, n, k)
						}
						if err := o.SkinnyGemm(m, n, k, c.alpha, X.Buffer(), lda, W.Buffer(), k, c.beta, C.Buffer(), Y.Buffer(), n); err != nil {
							return err
						}
						got := make([]float32, m*n)
						b.Download(ys, got)
						want := make([]float64, m*n)
						for i := range m {
							for j := range n {
								var s float64
								for p := range k {
									s += float64(xv[i*lda+p]) * float64(wv[j*k+p])
								}
								want[i*n+j] = float64(c.alpha)*s + float64(c.beta)*float64(cv[i*n+j])
							}
						}
						backendtest.Close(t, fmt.Sprintf("m %d n %d k %d alpha %g beta %g in place %v", m, n, k, c.alpha, c.beta, c.inPlace), got, want, 8e-3)
						b.ResetStep()
					}
				}
			}
		}
		return nil
	})
}

// TestGPUSkinnyGemmThroughput (DFLASH_GEMM_BENCH=1) times decoding's
// products of the Qwen3-8B shape at 1 and 16 rows on op_skinny_gemm and on
// cuBLASLt side by side, as the weight's bytes per second (what bounds
// them: a weight read once).
func TestGPUSkinnyGemmThroughput(t *testing.T) {
	if os.Getenv("DFLASH_GEMM_BENCH") == "" {
		t.Skip("set DFLASH_GEMM_BENCH=1 to time decoding's products")
	}
	gputest.OnBackend(t, NewBackend, func(d *gpu.Device, b *Backend) error {
		o := b.ops(dtype.BF16)
		for _, s := range []struct {
			name string
			n, k int
		}{{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 24576, 4096}, {"down", 4096, 12288}, {"lm_head", 151936, 4096}} {
			w := b.buf(b.AllocOut(s.n*s.k), "w").Buffer()
			for _, m := range []int{1, 16} {
				x, y := b.buf(b.AllocOut(m*s.k), "x").Buffer(), b.buf(b.AllocOut(m*s.n), "y").Buffer()
				spec := gpu.GemmSpec{M: m, N: s.n, K: s.k, TransB: true, LDA: s.k, LDB: s.k, LDC: s.n, In: dtype.BF16, Out: dtype.BF16}
				var ms [2]float64
				for i, run := range []func() error{
					func() error { return o.SkinnyGemm(m, s.n, s.k, 1, x, s.k, w, s.k, 0, y, y, s.n) },
					func() error { return o.run.gemm(spec, 1, x, w, 0, y, y) },
				} {
					tm, err := d.Time(5, 50, run)
					if err != nil {
						return err
					}
					ms[i] = float64(tm.Median()) / 1e6
				}
				gb := 2 * float64(s.n) * float64(s.k) / 1e9
				t.Logf("%-8s m %2d: op_skinny_gemm %.3f ms (%.0f GB/s), cuBLASLt %.3f ms (%.0f GB/s): %.2fx", s.name, m, ms[0], gb/ms[0]*1e3, ms[1], gb/ms[1]*1e3, ms[1]/ms[0])
			}
			b.ResetStep()
		}
		return nil
	})
}
