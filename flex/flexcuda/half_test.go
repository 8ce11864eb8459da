package flexcuda

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestHalfRounding checks that encoding picks a nearest representable value
// (ties to even) by comparing with the neighbouring bit patterns.
func TestHalfRounding(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 3))
	for _, fp16 := range []bool{false, true} {
		for i := 0; i < 20000; i++ {
			f := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(30)-20)))
			var h [1]uint16
			EncodeHalf(h[:], []float32{f}, fp16)
			dec := func(x uint16) float64 {
				var o [1]float32
				DecodeHalf(o[:], []uint16{x}, fp16)
				return float64(o[0])
			}
			got := math.Abs(dec(h[0]) - float64(f))
			for _, nb := range []uint16{h[0] - 1, h[0] + 1} {
				if nb&0x7fff == 0x7fff || (fp16 && nb&0x7c00 == 0x7c00) || (!fp16 && nb&0x7f80 == 0x7f80) {
					continue // NaN or Inf neighbour
				}
				if d := math.Abs(dec(nb) - float64(f)); d < got {
					t.Fatalf("fp16=%v: %g encoded as %#04x (%g), neighbour %#04x (%g) is nearer", fp16, f, h[0], dec(h[0]), nb, dec(nb))
				}
			}
		}
	}
	for _, c := range []struct {
		f    float32
		fp16 bool
		want uint16
	}{{1, false, 0x3f80}, {-2, false, 0xc000}, {1, true, 0x3c00}, {-2, true, 0xc000},
		{65504, true, 0x7bff}, {1e6, true, 0x7c00}, {float32(math.Ldexp(1, -24)), true, 0x0001}} {
		var h [1]uint16
		EncodeHalf(h[:], []float32{c.f}, c.fp16)
		if h[0] != c.want {
			t.Errorf("encode %g fp16=%v = %#04x, want %#04x", c.f, c.fp16, h[0], c.want)
		}
	}
}
