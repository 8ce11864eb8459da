package quant

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"dflash/dtype"
)

// Unit is the relative rounding error bound of a normal E4M3 value: half
// the spacing 2^-3 of its 3-bit mantissa.
const Unit = 0x1p-4

// subnormalStep is half the spacing of E4M3's subnormals (2^-9): the
// absolute rounding error bound, in units of the scale, below 2^-6.
const subnormalStep = 0x1p-10

// scaleOf returns amax/448 rounded to float32, or 1 when amax is 0.
func scaleOf(amax float64) float32 {
	if amax == 0 {
		return 1
	}
	return float32(amax / dtype.F8E4M3Max)
}

// RowScales returns one scale per row of x, a row-major rows x cols
// matrix: s_i = max_j |x[i][j]| / 448 (NaNs not counted), or 1 for a row
// of zeros. It panics when len(x) is not rows*cols.
func RowScales(x []float32, rows, cols int) []float32 {
	checkShape("RowScales", len(x), rows, cols)
	s := make([]float32, rows)
	for i := range s {
		s[i] = scaleOf(amax(x[i*cols : (i+1)*cols]))
	}
	return s
}

// TensorScale returns the one scale of all of x: max |x| / 448, or 1 when x
// is all zeros.
func TensorScale(x []float32) float32 { return scaleOf(amax(x)) }

// amax returns max |x|, NaNs not counted (fmaxf on the GPU skips them too).
func amax(x []float32) float64 {
	m := 0.0
	for _, v := range x {
		if a := math.Abs(float64(v)); a > m {
			m = a
		}
	}
	return m
}

// Quantize writes the E4M3 codes of x/scale into dst (float32 division,
// then dtype.Float32ToF8E4M3: nearest even, saturating at ±448). It panics
// when the lengths differ or scale is not positive.
func Quantize(dst []uint8, x []float32, scale float32) {
	if len(dst) != len(x) {
		panic(fmt.Sprintf("quant: Quantize of %d values into %d codes", len(x), len(dst)))
	}
	if !(scale > 0) {
		panic(fmt.Sprintf("quant: Quantize with scale %v", scale))
	}
	for i, v := range x {
		dst[i] = dtype.Float32ToF8E4M3(v / scale)
	}
}

// QuantizeRows writes the codes of x, a row-major rows x cols matrix, into
// dst, row i divided by scales[i]. It panics on a length that does not
// match the shape.
func QuantizeRows(dst []uint8, x []float32, rows, cols int, scales []float32) {
	checkShape("QuantizeRows", len(x), rows, cols)
	if len(dst) != len(x) || len(scales) != rows {
		panic(fmt.Sprintf("quant: QuantizeRows of %dx%d with %d codes and %d scales", rows, cols, len(dst), len(scales)))
	}
	for i, s := range scales {
		Quantize(dst[i*cols:(i+1)*cols], x[i*cols:(i+1)*cols], s)
	}
}

// Dequantize returns s_i · e4m3(q[i][j]) in float64 (exact) for the
// row-major rows x cols codes q with one scale per row.
func Dequantize(q []uint8, rows, cols int, scales []float32) []float64 {
	checkShape("Dequantize", len(q), rows, cols)
	if len(scales) != rows {
		panic(fmt.Sprintf("quant: Dequantize of %d rows with %d scales", rows, len(scales)))
	}
	out := make([]float64, len(q))
	for i, c := range q {
		out[i] = float64(scales[i/cols]) * float64(dtype.F8E4M3ToFloat32(c))
	}
	return out
}

// ElementBound returns the bound on |s·e4m3(Quantize(x, s)) - x| for an x
// with |x| ≤ 448·s: Unit·|x| for a normal result, 2^-10·s below 2^-6·s,
// summed, with the float32 rounding of x/s (relative 2^-24) added to the
// relative term.
func ElementBound(x float64, s float32) float64 {
	return (Unit+0x1p-22)*math.Abs(x) + subnormalStep*float64(s)
}

// ProductBound returns, for each element of the m x n product X·Wᵀ of
// x (m x k, one scale per row in sx) and w (n x k, scales sw), the bound on
// the error of the quantized product GemmRef against the exact one:
// Σ_p e(x_ip)|w_jp| + e(w_jp)|x_ip| + e(x_ip)e(w_jp), e = ElementBound,
// plus 2^-40 of Σ|x_ip w_jp| for GemmRef's float64 sums.
func ProductBound(x, sx, w, sw []float32, m, n, k int) []float64 {
	return productSums("ProductBound", x, sx, w, sw, m, n, k, func(a, b, ea, eb float64) float64 {
		return ea*math.Abs(b) + eb*math.Abs(a) + ea*eb + 0x1p-40*math.Abs(a*b)
	}, func(sum float64) float64 { return sum })
}

// ProductSigma returns, for each element of the quantized product X·Wᵀ
// (shapes as ProductBound), a bound on the standard deviation of its
// error: rounding errors of independent elements, each within ±e
// (ElementBound) and of variance at most e²/3, add up to at most
// sqrt(Σ_p (e(x_ip)²w_jp² + e(w_jp)²x_ip²)/3), neglecting the e·e terms. An
// error beyond 6 sigmas is, for random data, a bug, not bad luck.
func ProductSigma(x, sx, w, sw []float32, m, n, k int) []float64 {
	return productSums("ProductSigma", x, sx, w, sw, m, n, k, func(a, b, ea, eb float64) float64 {
		return ea*ea*b*b + eb*eb*a*a
	}, func(v float64) float64 { return math.Sqrt(v / 3) })
}

// productSums returns, for each element (i, j) of the m x n product X·Wᵀ
// (shapes as ProductBound), end of the sum over p of term(x_ip, w_jp,
// e(x_ip), e(w_jp)), e = ElementBound with the rows' scales; what names
// the caller in a shape error.
func productSums(what string, x, sx, w, sw []float32, m, n, k int, term func(a, b, ea, eb float64) float64, end func(float64) float64) []float64 {
	checkShape(what+" X", len(x), m, k)
	checkShape(what+" W", len(w), n, k)
	out := make([]float64, m*n)
	rowsInParallel(m, func(i int) {
		for j := range n {
			sum := 0.0
			for p := range k {
				a, b := float64(x[i*k+p]), float64(w[j*k+p])
				sum += term(a, b, ElementBound(a, sx[i]), ElementBound(b, sw[j]))
			}
			out[i*n+j] = end(sum)
		}
	})
	return out
}

// GemmRef returns the m x n product C[i][j] = sa[i]·sb[j]·Σ_p
// e4m3(qa[i][p])·e4m3(qb[j][p]) in float64: qa holds m x k codes with one
// scale per row (tokens x in), qb n x k codes with one scale per row
// (out x in, a linear layer's weight), both row-major, K contiguous. It is
// the reference of the FP8 GEMM C = X·Wᵀ. It panics on lengths that do not
// match the shapes.
func GemmRef(qa []uint8, sa []float32, qb []uint8, sb []float32, m, n, k int) []float64 {
	checkShape("GemmRef A", len(qa), m, k)
	checkShape("GemmRef B", len(qb), n, k)
	if len(sa) != m || len(sb) != n {
		panic(fmt.Sprintf("quant: GemmRef with %d and %d scales for M=%d N=%d", len(sa), len(sb), m, n))
	}
	var table [256]float64
	for c := range table {
		table[c] = float64(dtype.F8E4M3ToFloat32(uint8(c)))
	}
	b := make([]float64, len(qb)) // unscaled values, converted once
	for i, c := range qb {
		b[i] = table[c]
	}
	out := make([]float64, m*n)
	rowsInParallel(m, func(i int) {
		a := make([]float64, k)
		for p, c := range qa[i*k : (i+1)*k] {
			a[p] = table[c]
		}
		for j := range n {
			sum := 0.0
			for p, w := range b[j*k : (j+1)*k] {
				sum += a[p] * w
			}
			out[i*n+j] = float64(sa[i]) * float64(sb[j]) * sum
		}
	})
	return out
}

// rowsInParallel runs f(i) for i in [0, n) on every core.
func rowsInParallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

func checkShape(call string, n, rows, cols int) {
	if rows < 0 || cols < 0 || n != rows*cols {
		panic(fmt.Sprintf("quant: %s: %d elements for %dx%d", call, n, rows, cols))
	}
}
