package model

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// TestGradientsFiniteDifferences checks the whole model's gradients (tape
// through every layer, tied LM head, chunked loss) against central finite
// differences of the loss on the entries with the largest gradients, where
// float32 differences are accurate.
func TestGradientsFiniteDifferences(t *testing.T) {
	rng := testseed.New(t)
	cpu := tensor.NewCPU[float32](0)
	for _, arch := range []Architecture{Qwen3, Llama} {
		t.Run(string(arch), func(t *testing.T) {
			cfg := tinyConfig(arch, arch == Qwen3)
			cfg.AttentionBias = arch == Llama
			m := perturbed(t, cfg, rng.Uint64(), rng.Uint64())
			for _, p := range m.Params() { // larger weights give larger, better-conditioned gradients
				if len(p.Shape) == 2 {
					for i := range p.Data() {
						p.Data()[i] *= 5
					}
				}
			}
			const batch, length = 2, 6
			ids := randIDs(rng, batch*length, cfg.VocabSize)
			targets := NextTokenTargets(ids, batch, length)
			weights := make([]float64, len(ids))
			for i := range weights {
				weights[i] = 0.5 + rng.Float64()
			}
			pos := randPos(rng, batch, length)
			lossAt := func(tp *tensor.Tape) *tensor.Tensor {
				out := m.Forward(tp, Input{IDs: ids, Batch: batch, Len: length, Pos: pos})
				return m.Loss(tp, out.Final, targets, weights, 4).Loss
			}
			tp := tensor.NewTape(cpu)
			tp.Backward(lossAt(tp))
			type entry struct {
				p *tensor.Tensor
				i int
			}
			for _, p := range m.Params() {
				var es []entry
				for i := range p.Data() {
					es = append(es, entry{p, i})
				}
				sort.Slice(es, func(a, b int) bool {
					return math.Abs(float64(p.Grad()[es[a].i])) > math.Abs(float64(p.Grad()[es[b].i]))
				})
				for _, e := range es[:2] {
					g := float64(p.Grad()[e.i])
					x := p.Data()[e.i]
					diff := func(h float32) float64 { // central difference with step h
						p.Data()[e.i] = x + h
						lp := float64(lossAt(tensor.NewInference(cpu)).Data()[0])
						p.Data()[e.i] = x - h
						lm := float64(lossAt(tensor.NewInference(cpu)).Data()[0])
						p.Data()[e.i] = x
						return (lp - lm) / float64(2*h)
					}
					// Richardson extrapolation: the h² term of the truncation error
					// cancels, so the large weights' curvature does not show.
					fd := (4*diff(5e-3) - diff(1e-2)) / 3
					if math.Abs(fd-g) > 0.05*math.Abs(g)+2e-4 {
						t.Errorf("%s[%d]: gradient %.5g, finite difference %.5g", p.Name, e.i, g, fd)
					}
				}
			}
		})
	}
}

func randPos(rng *rand.Rand, batch, length int) []int32 {
	pos := make([]int32, batch*length)
	for b := range batch {
		off := int32(rng.IntN(20))
		for i := range length {
			pos[b*length+i] = off + int32(i)
		}
	}
	return pos
}

// TestTrainFromScratch trains a tiny model with plain SGD on a repeating
// pattern: the loss must fall far below its initial value (log vocab), and
// greedy generation must then continue the pattern.
func TestTrainFromScratch(t *testing.T) {
	cpu := tensor.NewCPU[float32](0)
	cfg := tinyConfig(Qwen3, true)
	cfg.VocabSize = 16
	m, err := New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	pattern := []int32{3, 7, 1, 12, 5, 9, 14, 2}
	const batch, length = 4, 16
	ids := make([]int32, batch*length)
	for b := range batch {
		for i := range length {
			ids[b*length+i] = pattern[(b+i)%len(pattern)]
		}
	}
	targets := NextTokenTargets(ids, batch, length)
	var first, last float64
	steps := 150
	if testing.Short() || raceEnabled {
		steps = 100
	}
	for step := range steps {
		tp := tensor.NewTape(cpu)
		out := m.Forward(tp, Input{IDs: ids, Batch: batch, Len: length})
		x := m.Loss(tp, out.Final, targets, nil, 0)
		tp.Backward(x.Loss)
		l := float64(x.Loss.Data()[0])
		if step == 0 {
			first = l
		}
		last = l
		for _, p := range m.Params() {
			for i, g := range p.Grad() {
				p.Data()[i] -= 0.5 * g
			}
			p.ZeroGrad()
		}
	}
	t.Logf("loss %.3f -> %.3f over %d steps", first, last, steps)
	if math.Abs(first-math.Log(float64(cfg.VocabSize))) > 0.3 {
		t.Errorf("initial loss %.3f, want about log(V) = %.3f", first, math.Log(float64(cfg.VocabSize)))
	}
	if last > 0.1*first {
		t.Fatalf("loss fell only from %.3f to %.3f", first, last)
	}
	gen, err := m.Generate(cpu, pattern[:3], GenerateOptions{MaxNewTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range gen {
		if want := pattern[(3+i)%len(pattern)]; g != want {
			t.Fatalf("generated %v, want the pattern %v continued", gen, pattern)
		}
	}
}
