package dflash

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"dflash/tensor"
)

// TestStepDeterministic requires a float32 training step (forward, loss,
// backward) to give bit-identical loss and parameter gradients on repeated
// runs and under GOMAXPROCS 1, 2 and 8, on a batch large enough that the
// flex attention backward sums several kv blocks into each query tile. This
// is what makes N steps straight and N/2 + resume + N/2 identical
// (cmd/dflash TestTrainCommand checks that end to end).
func TestStepDeterministic(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 6))
	c := testConfig()
	d := New[float32](c, rng)
	for _, p := range d.Params() {
		if len(p.Shape) == 2 {
			p.FillNormal(rng, 0, 1/math.Sqrt(float64(p.Shape[1])))
		} else {
			p.FillNormal(rng, 1, 0.2)
		}
	}
	head := Head[float32]{Embed: tensor.New[float32]("embed", c.VocabSize, c.HiddenSize), LMHead: tensor.New[float32]("lm", c.VocabSize, c.HiddenSize)}
	head.Embed.FillNormal(rng, 0, 1)
	head.LMHead.FillNormal(rng, 0, 0.3)
	// 2 rows of 300 tokens, 48 anchors of block 4: 192 queries and 492
	// keys, so 2 q tiles and 4 kv blocks of the default 128.
	R, S, anchors := 2, 300, 48
	b := &Batch{Rows: R, Len: S, IDs: make([]int32, R*S), LossMask: make([]uint8, R*S), SeqLen: []int{S, S - 37}}
	for r := 0; r < R; r++ {
		for i := 0; i < b.SeqLen[r]; i++ {
			b.IDs[r*S+i] = int32(rng.IntN(c.VocabSize - 1))
			b.LossMask[r*S+i] = uint8(min(1, rng.IntN(5)))
		}
	}
	for range c.TargetLayerIDs {
		h := make([]float32, R*S*c.HiddenSize)
		for i := range h {
			h[i] = float32(rng.NormFloat64())
		}
		b.Hidden = append(b.Hidden, h)
	}
	bl := BuildBlocks(c, b, SampleBatchAnchors(rng, b, anchors))
	step := func() (float32, [][]float32) {
		for _, p := range d.Params() {
			p.ZeroGrad()
		}
		tp := tensor.NewTape(tensor.NewCPU[float32](0))
		out, err := d.Forward(tp, true, head, b, bl)
		if err != nil {
			t.Fatal(err)
		}
		tp.Backward(out.Loss)
		var gs [][]float32
		for _, p := range d.Params() {
			gs = append(gs, append([]float32(nil), p.Grad...))
		}
		return out.Loss.Data[0], gs
	}
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
