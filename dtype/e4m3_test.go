package dtype

import (
	"math"
	"testing"

	"dflash/internal/testseed"
)

// e4m3Value decodes an E4M3FN code from the format's definition (bias 7,
// 3 mantissa bits, subnormals at exponent 0, NaN at S.1111.111, no
// infinities), independently of F8E4M3ToFloat32.
func e4m3Value(c uint8) float64 {
	e, m := int(c>>3)&0xf, float64(c&7)
	if e == 15 && m == 7 {
		return math.NaN()
	}
	v := math.Ldexp(m/8, -6)
	if e > 0 {
		v = math.Ldexp(1+m/8, e-7)
	}
	if c&0x80 != 0 {
		return -v
	}
	return v
}

// e4m3Nearest encodes x by brute force: the finite code of x's sign whose
// value is nearest x, the even code (even mantissa) on a tie; NaN gives
// 0x7f. Every finite value beyond 448 is nearest to ±448, which makes
// saturation the nearest-value rule.
func e4m3Nearest(x float64) uint8 {
	if math.IsNaN(x) {
		return 0x7f
	}
	var sign uint8
	if math.Signbit(x) {
		sign, x = 0x80, -x
	}
	best, bestD := uint8(0), math.Inf(1)
	for c := range uint8(0x7f) { // the non-negative finite codes 0x00..0x7e
		d := math.Abs(e4m3Value(c) - x)
		if math.IsInf(x, 1) {
			d = -float64(c) // infinity: the largest finite value
		}
		if d < bestD || d == bestD && c&1 == 0 {
			best, bestD = c, d
		}
	}
	return sign | best
}

// TestF8E4M3Decode: every one of the 256 codes decodes to its value by
// definition, sign of zero included.
func TestF8E4M3Decode(t *testing.T) {
	for c := range 256 {
		got, want := float64(F8E4M3ToFloat32(uint8(c))), e4m3Value(uint8(c))
		if math.IsNaN(want) != math.IsNaN(got) || !math.IsNaN(want) && (got != want || math.Signbit(got) != math.Signbit(want)) {
			t.Fatalf("decode %#02x = %g, want %g", c, got, want)
		}
	}
}

// TestF8E4M3RoundTrip: decoding then encoding returns every code, except
// the negative NaN 0xff, which comes back as the NaN 0x7f; -0 (0x80) stays
// -0.
func TestF8E4M3RoundTrip(t *testing.T) {
	for c := range 256 {
		want := uint8(c)
		if c == 0xff {
			want = 0x7f
		}
		if got := Float32ToF8E4M3(F8E4M3ToFloat32(uint8(c))); got != want {
			t.Errorf("%#02x -> %g -> %#02x, want %#02x", c, F8E4M3ToFloat32(uint8(c)), got, want)
		}
	}
}

// TestF8E4M3Encode compares the encoder with the brute-force nearest value
// on the ties (every midpoint between adjacent values, exact in float32),
// the float32 neighbours of each tie, subnormals, the saturation boundary,
// specials and random float32s of every magnitude.
func TestF8E4M3Encode(t *testing.T) {
	var xs []float32
	for c := range uint8(0x7e) { // adjacent non-negative finite values c, c+1
		mid := (e4m3Value(c) + e4m3Value(c+1)) / 2
		if float64(float32(mid)) != mid {
			t.Fatalf("midpoint %g not exact in float32", mid)
		}
		m := float32(mid)
		for _, v := range []float32{m, math.Nextafter32(m, 0), math.Nextafter32(m, 1e9), float32(e4m3Value(c))} {
			xs = append(xs, v, -v)
		}
	}
	xs = append(xs, 0, float32(math.Copysign(0, -1)), 448, -448, 449, 463.99997, 464, 465, 479, 480, 481, 1e6, -1e6,
		math.MaxFloat32, -math.MaxFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		0x1p-9, 0x1p-10, 0x1.000002p-10, 0x1.fffffep-11, 0x3p-11, 0x1p-6, 0x1.fp-7, 0x1p-11, 1e-30, -1e-30,
		math.SmallestNonzeroFloat32, 0x1p-126, 0x1.fffffcp-127)
	rng := testseed.New(t)
	for range 200000 {
		xs = append(xs, math.Float32frombits(rng.Uint32()))
		// magnitudes from 2^-14 to 2^12: the format's range and a little beyond
		xs = append(xs, float32(math.Ldexp(rng.Float64()*2-1, rng.IntN(27)-14)))
	}
	bad := 0
	for _, x := range xs {
		if got, want := Float32ToF8E4M3(x), e4m3Nearest(float64(x)); got != want {
			if bad < 5 {
				t.Errorf("encode %g (%#08x) = %#02x (%g), want %#02x (%g)", x, math.Float32bits(x), got,
					e4m3Value(got), want, e4m3Value(want))
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d inputs encoded wrongly", bad, len(xs))
	}
}
