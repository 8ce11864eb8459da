package dtype

import (
	"math"
	"sort"
	"testing"

	"dflash/internal/testseed"
)

// refDecode decodes a binary floating format with expBits exponent and manBits mantissa
// bits from its definition (IEEE style: bias 2^(expBits-1)-1, subnormals, inf/NaN).
func refDecode(code uint32, expBits, manBits int) float64 {
	sign := 1.0
	if code>>(expBits+manBits)&1 == 1 {
		sign = -1
	}
	e := int(code>>manBits) & (1<<expBits - 1)
	m := float64(code & (1<<manBits - 1))
	bias := 1<<(expBits-1) - 1
	switch {
	case e == 1<<expBits-1 && m == 0:
		return sign * math.Inf(1)
	case e == 1<<expBits-1:
		return math.NaN()
	case e == 0:
		return sign * math.Ldexp(m/math.Ldexp(1, manBits), 1-bias)
	}
	return sign * math.Ldexp(1+m/math.Ldexp(1, manBits), e-bias)
}

// refEncoder rounds to nearest, ties to the even code, by searching the sorted table of
// every non-negative finite value of the format; one step past the largest finite value
// stands for infinity.
type refEncoder struct {
	vals    []float64 // value of code i, i = 0 .. maxFinite, then the overflow threshold
	infCode uint32
	signBit uint32
}

func newRefEncoder(expBits, manBits int) *refEncoder {
	infCode := uint32(1<<expBits-1) << manBits
	r := &refEncoder{infCode: infCode, signBit: 1 << (expBits + manBits)}
	for c := uint32(0); c < infCode; c++ {
		r.vals = append(r.vals, refDecode(c, expBits, manBits))
	}
	bias := 1<<(expBits-1) - 1
	r.vals = append(r.vals, math.Ldexp(1, 1<<expBits-1-bias)) // 2^(emax+1)
	return r
}

func (r *refEncoder) encode(x float64) (code uint32, nan bool) {
	if math.IsNaN(x) {
		return 0, true
	}
	var sign uint32
	if math.Signbit(x) {
		sign = r.signBit
		x = -x
	}
	if math.IsInf(x, 1) {
		return sign | r.infCode, false
	}
	i := sort.SearchFloat64s(r.vals, x) // first index with vals[i] >= x
	if i == len(r.vals) {
		return sign | r.infCode, false
	}
	if r.vals[i] == x {
		return sign | uint32(i), false
	}
	lo, hi := uint32(i-1), uint32(i)
	dlo, dhi := x-r.vals[lo], r.vals[hi]-x
	c := hi
	if dlo < dhi || dlo == dhi && lo&1 == 0 {
		c = lo
	}
	return sign | c, false
}

// testInputs returns float32 values: random bit patterns, exact midpoints between
// neighbouring codes of the format (the ties), and specials.
func testInputs(t *testing.T, r *refEncoder, manBits, expBits int, n int) []float32 {
	rng := testseed.New(t)
	var xs []float32
	for range n {
		xs = append(xs, math.Float32frombits(rng.Uint32()))
	}
	for range n {
		c := rng.IntN(len(r.vals) - 1)
		mid := (r.vals[c] + r.vals[c+1]) / 2
		if float64(float32(mid)) != mid {
			t.Fatalf("midpoint %g not exact in float32", mid)
		}
		for _, v := range []float64{mid, -mid, math.Nextafter(mid, 0), math.Nextafter(mid, math.Inf(1))} {
			xs = append(xs, float32(v))
		}
	}
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32,
		1, -1, 65504, 65519.996, 65520, 65536, 0x1p-24, 0x1p-25, 0x3p-26, 0x1p-14, 0x1p-126, 0x1.fffffep-127,
		3.3895314e38, 3.3961775e38, 3.4028235e38, 1e-40, -1e-45}
	return append(xs, specials...)
}

// TestFloat16Formats checks bf16 and f16 against the float64 reference:
// every code decodes exactly, encoding rounds to nearest even on ordinary,
// tie and special inputs, and every non-NaN code survives a round trip.
func TestFloat16Formats(t *testing.T) {
	for _, f := range []struct {
		name      string
		exp, mant int
		decode    func(uint16) float32
		encode    func(float32) uint16
	}{
		{"BF16", 8, 7, BF16ToFloat32, Float32ToBF16},
		{"F16", 5, 10, F16ToFloat32, Float32ToF16},
	} {
		t.Run(f.name+"/decode-all", func(t *testing.T) {
			for c := range uint32(1 << 16) {
				got := float64(f.decode(uint16(c)))
				want := refDecode(c, f.exp, f.mant)
				if !(got == want || math.IsNaN(got) && math.IsNaN(want)) || math.Signbit(got) != math.Signbit(want) && !math.IsNaN(want) {
					t.Fatalf("%s decode %#04x = %g, want %g", f.name, c, got, want)
				}
			}
		})
		t.Run(f.name+"/encode", func(t *testing.T) {
			ref := newRefEncoder(f.exp, f.mant)
			for _, x := range testInputs(t, ref, f.mant, f.exp, 20000) {
				got := f.encode(x)
				want, nan := ref.encode(float64(x))
				if nan {
					if !math.IsNaN(float64(f.decode(got))) {
						t.Fatalf("%s encode NaN %#08x = %#04x, not NaN", f.name, math.Float32bits(x), got)
					}
					continue
				}
				if uint32(got) != want {
					t.Fatalf("%s encode %g = %#08x: %#04x, want %#04x", f.name, x, math.Float32bits(x), got, want)
				}
			}
		})
		t.Run(f.name+"/round-trip-all", func(t *testing.T) {
			for c := range uint32(1 << 16) {
				x := f.decode(uint16(c))
				if math.IsNaN(float64(x)) {
					continue
				}
				if back := f.encode(x); uint32(back) != c {
					t.Fatalf("%s %#04x -> %g -> %#04x", f.name, c, x, back)
				}
			}
		})
	}
}

func TestF8(t *testing.T) {
	cases := []struct {
		name string
		fn   func(uint8) float32
		code uint8
		want float64
	}{
		{"e4m3-one", F8E4M3ToFloat32, 0x38, 1},
		{"e4m3-max", F8E4M3ToFloat32, 0x7e, 448},
		{"e4m3-neg-max", F8E4M3ToFloat32, 0xfe, -448},
		{"e4m3-min-normal", F8E4M3ToFloat32, 0x08, 0x1p-6},
		{"e4m3-min-subnormal", F8E4M3ToFloat32, 0x01, 0x1p-9},
		{"e4m3-nan", F8E4M3ToFloat32, 0x7f, math.NaN()},
		{"e4m3-1.875*2^8", F8E4M3ToFloat32, 0x77, 240},
		{"e5m2-one", F8E5M2ToFloat32, 0x3c, 1},
		{"e5m2-max", F8E5M2ToFloat32, 0x7b, 57344},
		{"e5m2-inf", F8E5M2ToFloat32, 0x7c, math.Inf(1)},
		{"e5m2-min-subnormal", F8E5M2ToFloat32, 0x01, 0x1p-16},
		{"e5m2-neg-1.5", F8E5M2ToFloat32, 0xbe, -1.5},
		{"e8m0-one", F8E8M0ToFloat32, 0x7f, 1},
		{"e8m0-two", F8E8M0ToFloat32, 0x80, 2},
		{"e8m0-min", F8E8M0ToFloat32, 0x00, 0x1p-127},
		{"e8m0-nan", F8E8M0ToFloat32, 0xff, math.NaN()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := float64(c.fn(c.code))
			if !(got == c.want || math.IsNaN(got) && math.IsNaN(c.want)) {
				t.Fatalf("code %#02x = %g, want %g", c.code, got, c.want)
			}
		})
	}
}

// TestConvertInParallel: encoding and decoding more elements than one
// goroutine takes give, element for element, the scalar conversions (the
// split over goroutines changes nothing), special values included.
func TestConvertInParallel(t *testing.T) {
	rng := testseed.New(t)
	n := 3*parallelGrain + 12345
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10)))
	}
	src[0], src[parallelGrain], src[n-1] = float32(math.Inf(1)), float32(math.NaN()), -0
	for _, dt := range []DType{F32, BF16, F16, F64} {
		raw := make([]byte, n*dt.Size())
		EncodeFloat32(dt, raw, src)
		back := make([]float32, n)
		DecodeFloat32(dt, back, raw)
		for i, v := range src {
			var want float32
			switch dt {
			case F32, F64:
				want = v
			case BF16:
				want = BF16ToFloat32(Float32ToBF16(v))
			case F16:
				want = F16ToFloat32(Float32ToF16(v))
			}
			if math.Float32bits(back[i]) != math.Float32bits(want) && !(math.IsNaN(float64(want)) && math.IsNaN(float64(back[i]))) {
				t.Fatalf("%v element %d: %v encoded and decoded to %v, want %v", dt, i, v, back[i], want)
			}
		}
	}
}

// TestConvert: float32 values widen to the same numbers (bit for bit back
// after narrowing), and float64 values narrow to a float32 no farther from
// them than either float32 neighbour of the result.
func TestConvert(t *testing.T) {
	r := testseed.New(t)
	x := make([]float64, 1000)
	for i := range x {
		x[i] = r.NormFloat64() * math.Exp2(float64(r.IntN(60)-30))
	}
	n := Convert[float32](x)
	if len(n) != len(x) {
		t.Fatalf("%d values for %d", len(n), len(x))
	}
	for i, v := range n {
		e := math.Abs(float64(v) - x[i])
		for _, dir := range []float32{float32(math.Inf(1)), float32(math.Inf(-1))} {
			if o := math.Abs(float64(math.Nextafter32(v, dir)) - x[i]); o < e {
				t.Fatalf("x[%d] = %v narrowed to %v, but %v is nearer", i, x[i], v, math.Nextafter32(v, dir))
			}
		}
	}
	w := Convert[float64](n)
	for i, v := range w {
		if math.Float32bits(float32(v)) != math.Float32bits(n[i]) || v != float64(n[i]) {
			t.Fatalf("n[%d] = %v widened to %v", i, n[i], v)
		}
	}
	if got := Convert[float64]([]float32(nil)); len(got) != 0 {
		t.Fatalf("nil converted to %v", got)
	}
}
