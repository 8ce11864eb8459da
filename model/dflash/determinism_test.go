package dflash

import (
	"math"
	"runtime"
	"testing"

	"dflash/internal/testseed"
)

// TestStepDeterministic requires a float32 training step (forward, loss,
// backward) to give bit-identical loss and parameter gradients on repeated
// runs and under GOMAXPROCS 1, 2 and 8, on a batch large enough that the
// flex attention backward sums several kv blocks into each query tile. This
// is what makes N steps straight and N/2 + resume + N/2 identical
// (cmd/dflash TestTrainCommand checks that end to end).
func TestStepDeterministic(t *testing.T) {
	rng := testseed.New(t)
	// 2 rows of 300 tokens, 48 anchors of block 4: 192 queries and 492
	// keys, so 2 q tiles and 4 kv blocks of the default 128.
	const S = 300
	d, head, b, bl := randomDrafter[float32](rng, S, []int{S, S - 37}, 48)
	step := func() (float32, [][]float32) { return lossAndGrads(t, 0, d, head, b, bl) }
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(1)
	l0, g0 := step()
	for _, procs := range []int{1, 2, 8} {
		runtime.GOMAXPROCS(procs)
		for rep := 0; rep < 3; rep++ {
			l, g := step()
			if math.Float32bits(l) != math.Float32bits(l0) {
				t.Fatalf("GOMAXPROCS %d, run %d: loss %v, first run %v", procs, rep, l, l0)
			}
			for i := range g {
				for j := range g[i] {
					if math.Float32bits(g[i][j]) != math.Float32bits(g0[i][j]) {
						t.Fatalf("GOMAXPROCS %d, run %d: %s grad[%d] = %v, first run (GOMAXPROCS 1) %v",
							procs, rep, d.Params()[i].Name, j, g[i][j], g0[i][j])
					}
				}
			}
		}
	}
}
