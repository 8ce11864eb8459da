package quant

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/dtype"
	"dflash/internal/testseed"
)

// randomRows returns a rows x cols matrix of normal values whose rows have
// magnitudes spread over six decades (so per-row scales matter), with one
// value in eight a thousand times smaller than its row (the subnormal
// range), and row zeroRow (if in range) all zeros.
func randomRows(rng *rand.Rand, rows, cols, zeroRow int) []float32 {
	x := make([]float32, rows*cols)
	for i := range rows {
		mag := math.Pow(10, rng.Float64()*6-3)
		for j := range cols {
			v := rng.NormFloat64() * mag
			if rng.IntN(8) == 0 {
				v *= 1e-3
			}
			if i == zeroRow {
				v = 0
			}
			x[i*cols+j] = float32(v)
		}
	}
	return x
}

func TestRowScales(t *testing.T) {
	rng := testseed.New(t)
	const rows, cols = 37, 129
	x := randomRows(rng, rows, cols, 5)
	s := RowScales(x, rows, cols)
	q := make([]uint8, len(x))
	QuantizeRows(q, x, rows, cols, s)
	for i := range rows {
		m := 0.0
		for _, v := range x[i*cols : (i+1)*cols] {
			m = max(m, math.Abs(float64(v)))
		}
		want := float32(m / 448)
		if m == 0 {
			want = 1
		}
		if s[i] != want {
			t.Errorf("row %d: scale %v, want %v", i, s[i], want)
		}
		row := q[i*cols : (i+1)*cols]
		if slices.Contains(row, 0x7f) || slices.Contains(row, 0xff) {
			t.Errorf("row %d: a NaN code", i)
		}
		if m > 0 && !slices.Contains(row, 0x7e) && !slices.Contains(row, 0xfe) {
			t.Errorf("row %d: no code reaches ±448", i)
		}
	}
	if ts, want := TensorScale(x), float32(slices.Max(absAll(x))/448); ts != want {
		t.Errorf("TensorScale = %v, want %v", ts, want)
	}
	if TensorScale(make([]float32, 9)) != 1 {
		t.Error("TensorScale of zeros is not 1")
	}
}

func absAll(x []float32) []float64 {
	a := make([]float64, len(x))
	for i, v := range x {
		a[i] = math.Abs(float64(v))
	}
	return a
}

// TestQuantizeElementBound: per-row and per-tensor quantization err by at
// most ElementBound per element, and the bound is tight (some element
// comes within half of it).
func TestQuantizeElementBound(t *testing.T) {
	rng := testseed.New(t)
	const rows, cols = 64, 257
	x := randomRows(rng, rows, cols, -1)
	for _, mode := range []string{"per-row", "per-tensor"} {
		t.Run(mode, func(t *testing.T) {
			s := RowScales(x, rows, cols)
			if mode == "per-tensor" {
				ts := TensorScale(x)
				for i := range s {
					s[i] = ts
				}
			}
			q := make([]uint8, len(x))
			QuantizeRows(q, x, rows, cols, s)
			deq := Dequantize(q, rows, cols, s)
			worst := 0.0
			for i, v := range x {
				err, bound := math.Abs(deq[i]-float64(v)), ElementBound(float64(v), s[i/cols])
				if err > bound {
					t.Fatalf("x[%d] = %g: dequantized %g, error %g over the bound %g", i, v, deq[i], err, bound)
				}
				worst = max(worst, err/bound)
			}
			t.Logf("worst error / bound = %.3f", worst)
			if worst < 0.5 {
				t.Errorf("worst error / bound = %.3f: the bound is loose or the data too easy", worst)
			}
		})
	}
}

// violations counts the elements of got whose distance from exact exceeds
// bound, and returns the largest ratio of distance to bound.
func violations(got, exact, bound []float64) (bad int, worst float64) {
	for i := range got {
		d := math.Abs(got[i] - exact[i])
		if d > bound[i] {
			bad++
		}
		worst = max(worst, d/bound[i])
	}
	return bad, worst
}

// exactProduct returns X·Wᵀ of the unquantized values in float64.
func exactProduct(x, w []float32, m, n, k int) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			for p := range k {
				out[i*n+j] += float64(x[i*k+p]) * float64(w[j*k+p])
			}
		}
	}
	return out
}

type fp8Case struct {
	x, w, sx, sw []float32
	qx, qw       []uint8
	m, n, k      int
}

func newCase(rng *rand.Rand, m, n, k int) fp8Case {
	c := fp8Case{m: m, n: n, k: k, x: randomRows(rng, m, k, -1), w: randomRows(rng, n, k, 3)}
	c.sx, c.sw = RowScales(c.x, m, k), RowScales(c.w, n, k)
	c.qx, c.qw = make([]uint8, len(c.x)), make([]uint8, len(c.w))
	QuantizeRows(c.qx, c.x, m, k, c.sx)
	QuantizeRows(c.qw, c.w, n, k, c.sw)
	return c
}

// sixSigmas returns 6·ProductSigma of c plus the float64 slack of GemmRef.
func (c fp8Case) sixSigmas() []float64 {
	sig := ProductSigma(c.x, c.sx, c.w, c.sw, c.m, c.n, c.k)
	for i := range sig {
		sig[i] = 6*sig[i] + 1e-300
	}
	return sig
}

// TestGemmRefWithinBound: the FP8 product (per-token and per-channel
// scales) errs against the exact float64 product of the unquantized values
// by at most ProductBound, and by at most 6·ProductSigma, element by
// element; and GemmRef is the plain float64 product of the dequantized
// matrices.
func TestGemmRefWithinBound(t *testing.T) {
	rng := testseed.New(t)
	c := newCase(rng, 48, 40, 320)
	got := GemmRef(c.qx, c.sx, c.qw, c.sw, c.m, c.n, c.k)
	exact := exactProduct(c.x, c.w, c.m, c.n, c.k)
	for _, b := range []struct {
		name  string
		bound []float64
	}{
		{"ProductBound", ProductBound(c.x, c.sx, c.w, c.sw, c.m, c.n, c.k)},
		{"6 ProductSigma", c.sixSigmas()},
	} {
		bad, worst := violations(got, exact, b.bound)
		t.Logf("worst error / %s = %.4f", b.name, worst)
		if bad > 0 {
			t.Errorf("%d of %d elements over %s", bad, len(got), b.name)
		}
	}
	dx, dw := Dequantize(c.qx, c.m, c.k, c.sx), Dequantize(c.qw, c.n, c.k, c.sw)
	for i := range c.m {
		for j := range c.n {
			want, mag := 0.0, 0.0
			for p := range c.k {
				want += dx[i*c.k+p] * dw[j*c.k+p]
				mag += math.Abs(dx[i*c.k+p] * dw[j*c.k+p])
			}
			if d := math.Abs(got[i*c.n+j] - want); d > 1e-13*mag {
				t.Fatalf("GemmRef[%d][%d] = %g, dequantized product %g", i, j, got[i*c.n+j], want)
			}
		}
	}
}

// TestGemmRefWrongScale: the 6-sigma check catches a wrong scale: a weight
// row dequantized with twice its scale, two weight rows' scales swapped,
// and activations quantized with an eighth of theirs (saturating at ±448).
func TestGemmRefWrongScale(t *testing.T) {
	rng := testseed.New(t)
	c := newCase(rng, 32, 24, 256)
	exact := exactProduct(c.x, c.w, c.m, c.n, c.k)
	bound := c.sixSigmas()
	if bad, _ := violations(GemmRef(c.qx, c.sx, c.qw, c.sw, c.m, c.n, c.k), exact, bound); bad > 0 {
		t.Fatalf("right scales: %d elements over 6 sigmas", bad)
	}
	// the two rows of W (not the zero row 3) whose scales differ most
	lo, hi := 0, 0
	for j, s := range c.sw {
		if j == 3 {
			continue
		}
		if s < c.sw[lo] {
			lo = j
		}
		if s > c.sw[hi] {
			hi = j
		}
	}
	swapped := slices.Clone(c.sw)
	swapped[lo], swapped[hi] = swapped[hi], swapped[lo]
	doubled := slices.Clone(c.sw)
	doubled[7] *= 2
	sx := slices.Clone(c.sx)
	for i := range sx {
		sx[i] /= 8
	}
	saturated := make([]uint8, len(c.x))
	QuantizeRows(saturated, c.x, c.m, c.k, sx)
	for _, w := range []struct {
		name string
		got  []float64
		min  int // elements that must be over the bound
	}{
		{"doubled-scale", GemmRef(c.qx, c.sx, c.qw, doubled, c.m, c.n, c.k), c.m / 3},
		{"swapped-scales", GemmRef(c.qx, c.sx, c.qw, swapped, c.m, c.n, c.k), c.m},
		{"saturating-scale", GemmRef(saturated, sx, c.qw, c.sw, c.m, c.n, c.k), len(exact) / 2},
	} {
		t.Run(w.name, func(t *testing.T) {
			bad, worst := violations(w.got, exact, bound)
			t.Logf("%d elements over 6 sigmas, worst %.1f times", bad, worst)
			if bad < w.min {
				t.Fatalf("%d elements over 6 sigmas, want at least %d", bad, w.min)
			}
		})
	}
}

// TestQuantizeSaturates: values beyond 448·scale become ±448·scale, NaN
// codes never appear.
func TestQuantizeSaturates(t *testing.T) {
	x := []float32{1000, -1000, 448, -449, float32(math.Inf(1)), 0.5}
	q := make([]uint8, len(x))
	Quantize(q, x, 1)
	want := []uint8{0x7e, 0xfe, 0x7e, 0xfe, 0x7e, dtype.Float32ToF8E4M3(0.5)}
	if !slices.Equal(q, want) {
		t.Fatalf("codes %x, want %x", q, want)
	}
}
