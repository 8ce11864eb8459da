package tensor

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"dflash/internal/testseed"
)

// TestAnglesTable: Angles from r's table of positions equal cos and sin of
// pos·InvFreq computed directly for each position (bit for bit, in float32
// and float64), whatever order positions arrive in (the table grows when a
// larger one comes), for negative positions (not in the table) and from
// concurrent goroutines.
func TestAnglesTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 0))
	r, err := NewRope(64, 1e6, &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192})
	if err != nil {
		t.Fatal(err)
	}
	r.AttentionScale = 1.25
	want := func(p int32, i int) (float64, float64) {
		s, c := math.Sincos(float64(p) * r.InvFreq[i])
		return c * r.AttentionScale, s * r.AttentionScale
	}
	check := func(pos []int32) {
		c32, s32 := Angles[float32](r, pos)
		c64, s64 := Angles[float64](r, pos)
		for j, p := range pos {
			for i := range 32 {
				c, s := want(p, i)
				if c64[j*32+i] != c || s64[j*32+i] != s || c32[j*32+i] != float32(c) || s32[j*32+i] != float32(s) {
					t.Errorf("position %d pair %d: got %v %v (%v %v), want %v %v", p, i, c64[j*32+i], s64[j*32+i], c32[j*32+i], s32[j*32+i], c, s)
					return
				}
			}
		}
	}
	for _, hi := range []int32{5, 3, 100, 7000, 20000} {
		pos := make([]int32, 300)
		for j := range pos {
			pos[j] = rng.Int32N(hi)
		}
		pos[0] = -int32(rng.IntN(50)) - 1
		check(pos)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		pos := make([]int32, 200)
		for j := range pos {
			pos[j] = int32(rng.IntN(40000 * (g + 1)))
		}
		wg.Go(func() { check(pos) })
	}
	wg.Wait()
}
