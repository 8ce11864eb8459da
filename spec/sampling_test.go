package spec

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/internal/testseed"
	"dflash/model"
	"dflash/tensor"
)

// fixedQ is a test drafter whose block logits are the same random rows
// wherever it is asked: a proposal distribution unrelated to the target.
type fixedQ struct {
	B, taps int
	logits  []float32
}

func (f *fixedQ) BlockSize() int          { return f.B }
func (f *fixedQ) Taps() []int             { return []int{f.taps} }
func (f *fixedQ) Start(int) Sequence      { return f }
func (f *fixedQ) Extend([]*tensor.Tensor) {}
func (f *fixedQ) Propose(seqs []Sequence, _ []int32, _ bool) model.Rows {
	return model.Rows{Logits: slices.Repeat(f.logits, len(seqs)), Vocab: len(f.logits) / f.B}
}
func (f *fixedQ) Free() {}

// TestSamplingDistribution checks the speculative sampling rule: over many
// runs, the joint distribution of the first four generated tokens equals the
// target's own sampling distribution, computed exactly from full forward
// passes over every prefix (a chi-square test, cells with an expected count
// under 5 pooled, failing above the 1 − 3·10⁻⁶ quantile). The tiny target
// has 6 tokens and peaked distributions; blocks hold 3 tokens, so the first
// round verifies 2 drafts and a bonus token; drafters are a random DFlash
// drafter and fixed proposals near the target's marginals, with and without
// top-k, so drafts are accepted and rejected at every block position.
func TestSamplingDistribution(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 9))
	cpu := tensor.NewCPU[float32](1)
	cfg := samplingConfig
	m, random := samplingModels(t, cfg, rng, cpu)
	runs := 5000
	if raceEnabled || testing.Short() {
		runs = 1500
	}
	for _, c := range samplingCases(m, random, cpu, rng, nil) {
		t.Run(c.name, func(t *testing.T) {
			if err := checkSampling(t, cpu, m, c, runs, seed); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// samplingConfig is the tiny target of the CPU sampling tests: 6 tokens,
// peaked distributions (TestSamplingDistribution says why).
var samplingConfig = model.Config{Arch: model.Qwen3, VocabSize: 6, HiddenSize: 16, IntermediateSize: 24, NumLayers: 2,
	NumHeads: 2, NumKVHeads: 1, HeadDim: 8, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 64,
	InitializerRange: 0.4}

// samplingModels returns the target of cfg and a random DFlash drafter of
// one layer and blocks of 3 for it, on b (nil: the CPU).
func samplingModels(t *testing.T, cfg model.Config, rng *rand.Rand, b tensor.Backend[float32]) (*model.Model, *DFlash) {
	t.Helper()
	m, err := model.New(cfg, rng.Uint64())
	if err != nil {
		t.Fatal(err)
	}
	return m, randomDFlash(t, m, 1, 3, rng, b)
}

// samplingCase is one drafter and decoding of the sampling test, after
// prompt.
type samplingCase struct {
	name   string
	prompt []int32
	d      Drafter
	o      Options
}

// samplingCases draws the prompt (again while ok, when not nil, refuses
// it) and returns the sampling test's cases on b: the random drafter at
// T = 1, and fixed proposals at T = 0.8, top-3.
func samplingCases(m *model.Model, random *DFlash, b tensor.Backend[float32], rng *rand.Rand, ok func([]int32) bool) []samplingCase {
	V := m.Config.VocabSize
	var prompt []int32
	for tries := 0; ; tries++ {
		prompt = []int32{int32(rng.IntN(V)), int32(rng.IntN(V)), int32(rng.IntN(V))}
		if ok == nil || ok(prompt) {
			break
		}
		if tries == 200 {
			panic("samplingCases: no prompt of 200 is clear of ties")
		}
	}
	// The fixed proposals are the log marginals of the target's 2nd and 3rd
	// generated tokens plus noise: near enough to the target that drafts at
	// both block positions are accepted often, far enough that they are
	// also rejected, whatever the seed.
	top3 := Options{Temperature: 0.8, TopK: 3}
	marg := jointProbs(m, b, prompt, 3, top3)
	q := &fixedQ{B: 3, taps: 0, logits: make([]float32, 3*V)}
	for c, p := range marg {
		q.logits[V+c/V%V] += float32(p) // token 2 of the cell
		q.logits[2*V+c%V] += float32(p) // token 3
	}
	for i := V; i < len(q.logits); i++ {
		q.logits[i] = float32(math.Log(float64(q.logits[i])+0.02) + 0.7*rng.NormFloat64())
	}
	return []samplingCase{
		{"dflash T=1", prompt, random, Options{Temperature: 1}},
		{"fixed T=0.8 top-3", prompt, q, top3},
	}
}

// checkSampling runs c runs times on b (seeds seed, seed+1, ...) and
// returns an error when the joint distribution of the first four tokens
// fails the chi-square test against the target's own distribution on b, or
// when a block position saw only acceptances or only rejections. It calls
// no t.Fatal: it may run on a GPU worker's goroutine.
func checkSampling(t *testing.T, b tensor.Backend[float32], m *model.Model, c samplingCase, runs int, seed uint64) error {
	const gen = 4
	V := m.Config.VocabSize
	want := jointProbs(m, b, c.prompt, gen, c.o)
	counts := make([]float64, len(want))
	st := NewStats(c.d.BlockSize())
	for i := range runs {
		o := c.o
		o.MaxNewTokens, o.Seed = gen, seed+uint64(i)
		out, s, err := Generate(context.Background(), b, m, c.d, c.prompt, o)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if len(out) != gen {
			return fmt.Errorf("%s: run %d: %d tokens", c.name, i, len(out))
		}
		counts[cell(out, V)]++
		st.Add(s)
	}
	chi2, dof := chiSquare(counts, want, float64(runs))
	z := wilsonHilferty(chi2, dof)
	t.Logf("%s: %d runs: chi-square %.1f with %d degrees of freedom (z %.2f); acceptance length %.3f, per position %.3f",
		c.name, runs, chi2, dof, z, st.AcceptanceLength(), st.SlotAcceptance())
	if z > 4.5 {
		return fmt.Errorf("%s: the generated tokens do not follow the target's distribution: chi-square %.1f, %d degrees of freedom (z %.2f)", c.name, chi2, dof, z)
	}
	var errs []error
	for s, tried := range st.SlotTried {
		if st.SlotAccepted[s] == 0 || st.SlotAccepted[s] == tried {
			errs = append(errs, fmt.Errorf("%s: block position %d: %d of %d drafts accepted; both outcomes must occur", c.name, s+1, st.SlotAccepted[s], tried))
		}
	}
	return errors.Join(errs...)
}

// cell indexes a token sequence in base v.
func cell(seq []int32, v int) int {
	c := 0
	for _, x := range seq {
		c = c*v + int(x)
	}
	return c
}

// jointProbs returns the target's own probability of every sequence of n
// generated tokens after prompt under o's temperature and top-k, indexed by
// cell, from a full forward pass per prefix on b.
func jointProbs(m *model.Model, b tensor.Backend[float32], prompt []int32, n int, o Options) []float64 {
	V := m.Config.VocabSize
	out := make([]float64, int(math.Pow(float64(V), float64(n))))
	var walk func(seq []int32, p float64)
	walk = func(seq []int32, p float64) {
		if len(seq) == len(prompt)+n {
			out[cell(seq[len(prompt):], V)] = p
			return
		}
		var l []float32
		tensor.Scope(b, func() {
			tp := tensor.NewInference(b)
			l = tensor.Values(b, m.Logits(tp, m.Forward(tp, model.Input{IDs: seq, Batch: 1, Len: len(seq)}).Final))
		})
		probs := model.Probs(l[len(l)-V:], o.Temperature, o.TopK)
		for x, px := range probs {
			if px > 0 {
				walk(append(seq[:len(seq):len(seq)], int32(x)), p*px)
			}
		}
	}
	walk(append([]int32(nil), prompt...), 1)
	return out
}

// chiSquare returns Pearson's statistic of counts against probabilities
// want over n draws, pooling the cells whose expected count is under 5 into
// one, and its degrees of freedom. A count in a cell of probability 0 makes
// the statistic infinite.
func chiSquare(counts, want []float64, n float64) (float64, int) {
	var chi2, poolE, poolO float64
	cells := 0
	for i, p := range want {
		e := p * n
		switch {
		case p == 0 && counts[i] > 0:
			return math.Inf(1), 1
		case e < 5:
			poolE += e
			poolO += counts[i]
		default:
			chi2 += (counts[i] - e) * (counts[i] - e) / e
			cells++
		}
	}
	if poolE > 0 {
		chi2 += (poolO - poolE) * (poolO - poolE) / poolE
		cells++
	}
	return chi2, cells - 1
}

// wilsonHilferty returns the standard normal deviate of a chi-square value
// with k degrees of freedom ((χ²/k)^(1/3) is nearly normal).
func wilsonHilferty(chi2 float64, k int) float64 {
	kf := float64(k)
	return (math.Cbrt(chi2/kf) - (1 - 2/(9*kf))) / math.Sqrt(2/(9*kf))
}
