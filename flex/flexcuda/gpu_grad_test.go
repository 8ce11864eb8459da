package flexcuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"dflash/flex"
)

// Tensors of tensorScore, one per way a score program indexes a tensor.
const (
	headTemp  = "head_temp"  // [heads]: per-head temperature
	queryTemp = "query_temp" // [len q]: per-query temperature
	keyBias   = "key_bias"   // [len kv]: per-key bias
	distBias  = "dist_bias"  // [17]: relative-position table, q - kv clamped to [-8, 8]
)

// tensorScore is score * head_temp[h] * query_temp[q] + key_bias[kv] +
// dist_bias[clamp(q - kv, -8, 8) + 8]: a gradient for each of its tensors.
func tensorScore() *flex.ScoreProgram {
	ht, qt := flex.FloatTensorParam(headTemp, 1), flex.FloatTensorParam(queryTemp, 1)
	kb, db := flex.FloatTensorParam(keyBias, 1), flex.FloatTensorParam(distBias, 1)
	dist := flex.Q().Sub(flex.KV()).Clamp(flex.Const(-8), flex.Const(8)).Add(flex.Const(8))
	return flex.NewScore("tensor_grads", flex.Score().Mul(ht.At(flex.H())).Mul(qt.At(flex.Q())).Add(kb.At(flex.KV())).Add(db.At(dist)))
}

func tensorScoreArgs(r *rand.Rand, d flex.Dims) *flex.Args {
	draw := func(n int, mean, sd float64) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = mean + sd*r.NormFloat64()
		}
		return x
	}
	return flex.NewArgs().SetFloatTensor(headTemp, draw(d.HeadsQ, 1, 0.3), d.HeadsQ).
		SetFloatTensor(queryTemp, draw(d.LenQ, 1, 0.2), d.LenQ).
		SetFloatTensor(keyBias, draw(d.LenKV, 0, 0.5), d.LenKV).
		SetFloatTensor(distBias, draw(17, 0, 0.5), 17)
}

func alibiArgs(r *rand.Rand, d flex.Dims) *flex.Args {
	s := make([]float64, d.HeadsQ)
	for i := range s {
		s[i] = 0.01 + 0.09*r.Float64()
	}
	return flex.NewArgs().SetFloatTensor(flex.ALiBiSlopesName, s, d.HeadsQ)
}

// scoreGradCases check the gradients of score programs' float tensors
// (indexed by head, query, key and distance; ALiBi's slopes by head times
// distance) at every head dimension with both backward kernels; at head
// dimension 256 the Hopper backward runs two CTAs per kv block, of which
// only one may add them. The deterministic backward refuses such programs
// (TestDeterministicRefusesTensorGrads).
func scoreGradCases() []attnCase {
	var cs []attnCase
	for _, d := range []int{64, 128, 256} {
		for _, k := range []Kernel{Hopper, Portable} {
			cs = append(cs,
				attnCase{fmt.Sprintf("tensors/g2/d%d/bwd-%s", d, k), flex.Causal(), tensorScore(), Config{HeadDim: d, Group: 2, Bwd: k},
					square(1, 4, 2, 150, 300, d), tensorScoreArgs},
				attnCase{fmt.Sprintf("alibi/d%d/bwd-%s", d, k), flex.SlidingWindow(100), flex.ALiBi(), Config{HeadDim: d, Bwd: k},
					square(1, 3, 3, 150, 300, d), alibiArgs})
		}
	}
	return cs
}

// TestGPUScoreTensorGrads compares the score tensors' gradients (and
// everything else) with the CPU float64 reference within runGPUCases'
// bound, 1e-2 relative error (3e-2 for ALiBi's slopes); a gradient added
// twice has relative error 1.
func TestGPUScoreTensorGrads(t *testing.T) {
	runGPUCases(t, scoreGradCases(), nil)
}

// TestScoreGradCasesBuild checks on the CPU that every case of
// TestGPUScoreTensorGrads generates its kernels and reads the tensors it
// is given.
func TestScoreGradCasesBuild(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range scoreGradCases() {
		a, err := New(nil, c.mask, c.score, c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if a.Spec().Bwd != c.cfg.Bwd {
			t.Errorf("%s: backward %v", c.name, a.Spec().Bwd)
		}
		d := c.dims(r)
		args := c.args(r, d)
		for _, name := range a.layout.grads {
			if _, ok := args.FloatTensors[name]; !ok {
				t.Errorf("%s: no values for tensor %q", c.name, name)
			}
		}
		if len(a.layout.grads) == 0 {
			t.Errorf("%s: no tensor gradients to check", c.name)
		}
	}
}
