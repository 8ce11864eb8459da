package tensorcuda

import (
	"fmt"
	"strings"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/tensor"
)

// tolGemmF32 is the tolerance of fp32 results of a GEMM (fp32 storage, or
// GemmF32Out): fp32 accumulation of up to 1000 products in whatever order
// cuBLASLt's algorithm picks (split-K included) errs by a few 2⁻²⁴·√k
// relative to the result's rms; 1e-4 leaves a margin and still fails any
// wrong transpose, leading dimension or scale by orders of magnitude.
const tolGemmF32 = 1e-4

// TestGPUGemm checks Gemm and GemmF32Out against the float64 CPU backend on
// odd shapes, every transpose combination, padded leading dimensions, and
// beta 0 (C poisoned with NaN, which must be ignored) and beta ≠ 0. Inputs
// are rounded to the storage dtype first; bf16 C is held to tolBF16 (one
// rounding of the output), fp32 C to tolGemmF32.
func TestGPUGemm(t *testing.T) {
	forDTypes(t, func(e *env) {
		for _, s := range [][3]int{{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {100, 257, 31}, {128, 64, 1000}, {3, 1000, 9}} {
			m, n, k := s[0], s[1], s[2]
			for tr := range 4 {
				transA, transB := tr&1 != 0, tr&2 != 0
				ar, ac, br, bc := tensor.GemmOperands(transA, transB, m, n, k)
				lda, ldb, ldc := ac+e.r.IntN(4), bc+e.r.IntN(4), n+e.r.IntN(4)
				a, av := e.store(e.normal((ar-1)*lda+ac, 1))
				b, bv := e.store(e.normal((br-1)*ldb+bc, 1))
				alpha := float32(0.75)
				for _, f32out := range []bool{false, true} {
					beta := float32(0) // half the cases, in each output dtype
					if (tr%2 == 1) != f32out {
						beta = 0.5
					}
					cn := (m-1)*ldc + n
					var c gpu.Buffer
					var cv []float64
					switch {
					case beta == 0 && !f32out:
						c, cv = e.out(cn), make([]float64, cn)
					case beta == 0:
						c, cv = e.outF32(cn), make([]float64, cn)
					case !f32out:
						c, cv = e.store(e.normal(cn, 1))
					default:
						c, cv = e.f32(e.normal(cn, 1))
					}
					name := fmt.Sprintf("%dx%dx%d transA=%v transB=%v ld=%d,%d,%d beta=%g", m, n, k, transA, transB, lda, ldb, ldc, beta)
					ref.Gemm(transA, transB, m, n, k, float64(alpha), av, lda, bv, ldb, float64(beta), cv, ldc)
					var got []float64
					tl := tolGemmF32
					if f32out {
						e.check(e.o.GemmF32Out(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
						got = e.loadF32(c, cn)
						name = "GemmF32Out " + name
					} else {
						e.check(e.o.Gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
						got = e.load(c, cn)
						name = "Gemm " + name
						if e.dt == dtype.BF16 {
							tl = tolBF16
						}
					}
					e.compare(name, rowsOf(got, m, n, ldc), rowsOf(cv, m, n, ldc), tl)
				}
			}
		}
	})
}

// rowsOf returns the m×n matrix stored with row stride ld in x, packed
// (the padding between rows is not C's and stays unwritten).
func rowsOf(x []float64, m, n, ld int) []float64 {
	out := make([]float64, 0, m*n)
	for r := range m {
		out = append(out, x[r*ld:r*ld+n]...)
	}
	return out
}

// TestGemmSpec checks the cuBLASLt product Gemm asks for: shape,
// transposes, leading dimensions and dtypes, and the size checks.
func TestGemmSpec(t *testing.T) {
	big := gpu.Buffer{Ptr: 0x10000, Size: 1 << 40}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F32} {
		o, f := fakeOps(dt)
		if err := o.Gemm(true, false, 7, 5, 3, 1, big, 9, big, 6, 0, big, 8); err != nil {
			t.Fatal(err)
		}
		if err := o.GemmF32Out(false, true, 7, 5, 3, 1, big, 3, big, 3, 1, big, 5); err != nil {
			t.Fatal(err)
		}
		if err := o.Gemm(false, false, 0, 5, 3, 1, gpu.Buffer{}, 3, gpu.Buffer{}, 5, 0, gpu.Buffer{}, 5); err != nil {
			t.Fatal(err)
		}
		other := gpu.Buffer{Ptr: 0x20000, Size: 70 * int64(dt.Size())}
		if err := o.GemmAdd(false, true, 7, 5, 3, 1, big, 3, big, 3, big, other, 5); err != nil {
			t.Fatal(err)
		}
		want := []gpu.GemmSpec{
			{M: 7, N: 5, K: 3, TransA: true, LDA: 9, LDB: 6, LDC: 8, In: dt, Out: dt},
			{M: 7, N: 5, K: 3, TransB: true, LDA: 3, LDB: 3, LDC: 5, In: dt, Out: dtype.F32},
			{M: 7, N: 5, K: 3, TransB: true, LDA: 3, LDB: 3, LDC: 5, In: dt, Out: dt},
		}
		if fmt.Sprint(f.gemms) != fmt.Sprint(want) {
			t.Errorf("%v: specs %+v, want %+v", dt, f.gemms, want)
		}
		// Gemm reads and writes one C; GemmAdd reads C, writes D, with beta 1.
		if cd := f.gemmCD; cd[0] != [2]gpu.Buffer{big, big} || cd[2] != [2]gpu.Buffer{big, other} || f.gemmBeta[2] != 1 {
			t.Errorf("%v: C and D %v, betas %v", dt, cd, f.gemmBeta)
		}
	}
	o, _ := fakeOps(dtype.BF16)
	for _, c := range []struct {
		name, want string
		f          func()
	}{
		// A is 3×7 (transposed) with ld 7: 2·7+7 = 21 elements, 42 bytes.
		{"a size", "Gemm: A holds 40 bytes, needs 42", func() {
			_ = o.Gemm(true, false, 7, 5, 3, 1, gpu.Buffer{Ptr: 1, Size: 40}, 7, big, 5, 0, big, 5)
		}},
		{"ld below row", "Gemm: B is 3×5 with leading dimension 4", func() { _ = o.Gemm(false, false, 7, 5, 3, 1, big, 3, big, 4, 0, big, 5) }},
		// fp32 C of 7×5: 140 bytes.
		{"f32 c size", "GemmF32Out: C holds 70 bytes, needs 140", func() {
			_ = o.GemmF32Out(false, false, 7, 5, 3, 1, big, 3, big, 5, 0, gpu.Buffer{Ptr: 1, Size: 70}, 5)
		}},
		// bf16 D of 7×5: 70 bytes.
		{"d size", "GemmAdd: D holds 40 bytes, needs 70", func() {
			_ = o.GemmAdd(false, false, 7, 5, 3, 1, big, 3, big, 5, big, gpu.Buffer{Ptr: 1, Size: 40}, 5)
		}},
		{"k zero", "Gemm: k = 0", func() { _ = o.Gemm(false, false, 7, 5, 0, 1, big, 0, big, 5, 0, big, 5) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, c.want) {
					t.Fatalf("panic %v, want one containing %q", r, c.want)
				}
			}()
			c.f()
		})
	}
}
