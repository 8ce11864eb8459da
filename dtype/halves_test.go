package dtype

import (
	"math"
	"testing"

	"dflash/internal/testseed"
)

// TestHalvesRounding checks that EncodeHalves picks a nearest representable value
// (ties to even) by comparing with the neighbouring bit patterns.
func TestHalvesRounding(t *testing.T) {
	r := testseed.New(t)
	for _, dt := range []DType{BF16, F16} {
		fp16 := dt == F16
		for i := 0; i < 20000; i++ {
			f := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(30)-20)))
			var h [1]uint16
			EncodeHalves(dt, h[:], []float32{f})
			dec := func(x uint16) float64 {
				var o [1]float32
				DecodeHalves(dt, o[:], []uint16{x})
				return float64(o[0])
			}
			got := math.Abs(dec(h[0]) - float64(f))
			for _, nb := range []uint16{h[0] - 1, h[0] + 1} {
				if nb&0x7fff == 0x7fff || (fp16 && nb&0x7c00 == 0x7c00) || (!fp16 && nb&0x7f80 == 0x7f80) {
					continue // NaN or Inf neighbour
				}
				if d := math.Abs(dec(nb) - float64(f)); d < got {
					t.Fatalf("%v: %g encoded as %#04x (%g), neighbour %#04x (%g) is nearer", dt, f, h[0], dec(h[0]), nb, dec(nb))
				}
			}
		}
	}
	for _, c := range []struct {
		f    float32
		dt   DType
		want uint16
	}{{1, BF16, 0x3f80}, {-2, BF16, 0xc000}, {1, F16, 0x3c00}, {-2, F16, 0xc000},
		{65504, F16, 0x7bff}, {1e6, F16, 0x7c00}, {float32(math.Ldexp(1, -24)), F16, 0x0001}} {
		var h [1]uint16
		EncodeHalves(c.dt, h[:], []float32{c.f})
		if h[0] != c.want {
			t.Errorf("encode %g as %v = %#04x, want %#04x", c.f, c.dt, h[0], c.want)
		}
	}
}
