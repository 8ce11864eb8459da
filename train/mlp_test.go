package train

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"dflash/internal/rngstream"
	"dflash/tensor"
)

// mlp is the synthetic model of the trainer tests: y = w2 . tanh(W1 x + b1) + b2,
// squared-error loss, forward and backward in float64 over the host values
// of a parameter arena on the CPU backend.
type mlp struct {
	in, hid        int
	arena          *tensor.Arena[float32]
	w1, b1, w2, b2 *tensor.Tensor
}

// testCPU is the backend of the trainer tests' models.
var testCPU = tensor.NewCPU[float32](0)

func newMLP(seed uint64, in, hid int) *mlp {
	a := &tensor.Arena[float32]{}
	m := &mlp{in: in, hid: hid, arena: a,
		w1: a.Param("layers.0.weight", hid, in), b1: a.Param("layers.0.bias", hid),
		w2: a.Param("head.weight", 1, hid), b2: a.Param("head.bias", 1)}
	a.Alloc()
	a.EnsureGrad()
	r := NewRNG(seed, rngstream.Init)
	for _, p := range m.params() {
		for i := range p.Data() {
			p.Data()[i] = float32(r.NormFloat64() / math.Sqrt(float64(p.Shape[len(p.Shape)-1])))
		}
	}
	return m
}

func (m *mlp) params() []*tensor.Tensor { return m.arena.Params() }

// flops is the work of one example's forward and backward pass: the
// multiply-adds of its two layers, once forward and twice backward.
func (m *mlp) flops() float64 { return 3 * 2 * float64(m.hid*m.in+m.hid) }

func (m *mlp) forward(x []float64) (y float64, h []float64) {
	h = make([]float64, m.hid)
	y = float64(m.b2.Data()[0])
	for j := range m.hid {
		a := float64(m.b1.Data()[j])
		for i, xi := range x {
			a += float64(m.w1.Data()[j*m.in+i]) * xi
		}
		h[j] = math.Tanh(a)
		y += float64(m.w2.Data()[j]) * h[j]
	}
	return y, h
}

// lossGrad returns the mean of (y-t)^2/2 over the batch and adds its gradient into Grad.
func (m *mlp) lossGrad(xs [][]float64, ts []float64) (loss, acc float64) {
	gw1 := make([]float64, m.w1.Numel())
	gb1 := make([]float64, m.hid)
	gw2 := make([]float64, m.hid)
	var gb2 float64
	n := float64(len(xs))
	for b, x := range xs {
		y, h := m.forward(x)
		d := y - ts[b]
		loss += d * d / 2 / n
		if math.Abs(d) < 0.25 {
			acc += 1 / n
		}
		dy := d / n
		gb2 += dy
		for j := range m.hid {
			gw2[j] += dy * h[j]
			da := dy * float64(m.w2.Data()[j]) * (1 - h[j]*h[j])
			gb1[j] += da
			for i, xi := range x {
				gw1[j*m.in+i] += da * xi
			}
		}
	}
	for i, g := range gw1 {
		m.w1.Grad()[i] += float32(g)
	}
	for j := range m.hid {
		m.b1.Grad()[j] += float32(gb1[j])
		m.w2.Grad()[j] += float32(gw2[j])
	}
	m.b2.Grad()[0] += float32(gb2)
	return loss, acc
}

// teacher is the function the mlp learns.
func teacher(x []float64) float64 {
	s := 0.0
	for i, v := range x {
		s += math.Sin(float64(i+1)*v) / float64(i+1)
	}
	return s
}

// pool is a data iterator over a fixed set of examples, reshuffled each epoch by its
// own RNG; its position (epoch, index, order, RNG state) is the opaque data state.
type pool struct {
	xs    [][]float64
	rng   *RNG
	Epoch int   `json:"epoch"`
	Pos   int   `json:"pos"`
	Order []int `json:"order"`
}

func newPool(seed uint64, n, in int) *pool {
	r := NewRNG(seed, 100)
	p := &pool{rng: NewRNG(seed, rngstream.Data)}
	for range n {
		x := make([]float64, in)
		for i := range x {
			x[i] = r.NormFloat64()
		}
		p.xs = append(p.xs, x)
	}
	p.Order = p.rng.Perm(n)
	return p
}

func (p *pool) next() []float64 {
	if p.Pos == len(p.Order) {
		p.Epoch++
		p.Pos = 0
		p.Order = p.rng.Perm(len(p.xs))
	}
	x := p.xs[p.Order[p.Pos]]
	p.Pos++
	return x
}

type poolState struct {
	Epoch int             `json:"epoch"`
	Pos   int             `json:"pos"`
	Order []int           `json:"order"`
	RNG   json.RawMessage `json:"rng"`
}

func (p *pool) state() (json.RawMessage, error) {
	r, err := p.rng.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return json.Marshal(poolState{p.Epoch, p.Pos, p.Order, r})
}

func (p *pool) restore(b json.RawMessage) error {
	var s poolState
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	p.Epoch, p.Pos, p.Order = s.Epoch, s.Pos, s.Order
	return p.rng.UnmarshalJSON(s.RNG)
}

// task bundles the model, its data and the Hooks for Run. Each micro-batch takes
// fromPool examples of the pool and fresh examples drawn from the training RNG, with
// label noise from the same RNG.
type task struct {
	m         *mlp
	data      *pool
	eval      [][]float64
	batch     int
	stepDelay time.Duration
	onStep    func(StepInfo)
}

func newTask(seed uint64, hid int) *task {
	const in = 4
	t := &task{m: newMLP(seed, in, hid), data: newPool(seed, 24, in), batch: 8}
	r := NewRNG(seed, 200)
	for range 32 {
		x := make([]float64, in)
		for i := range x {
			x[i] = r.NormFloat64()
		}
		t.eval = append(t.eval, x)
	}
	return t
}

func (t *task) hooks() Hooks {
	return Hooks{
		Backend: testCPU,
		Arena:   t.m.arena,
		Step: func(ctx context.Context, s StepInfo) (float64, map[string]float64, int, error) {
			if t.onStep != nil {
				t.onStep(s)
			}
			if t.stepDelay > 0 {
				time.Sleep(t.stepDelay)
			}
			var xs [][]float64
			var ys []float64
			for b := range t.batch {
				var x []float64
				if b%2 == 0 {
					x = t.data.next()
				} else {
					x = make([]float64, t.m.in)
					for i := range x {
						x[i] = s.RNG.NormFloat64()
					}
				}
				xs = append(xs, x)
				ys = append(ys, teacher(x)+0.01*s.RNG.NormFloat64())
			}
			loss, acc := t.m.lossGrad(xs, ys)
			s.Count(t.batch, float64(t.batch)*t.m.flops())
			return loss, map[string]float64{"acc": acc}, t.batch * t.m.in, nil
		},
		Eval: func(ctx context.Context, e EvalInfo) (map[string]float64, error) {
			var loss, acc float64
			for _, x := range t.eval {
				y, _ := t.m.forward(x)
				d := y - teacher(x)
				loss += d * d / 2 / float64(len(t.eval))
				if math.Abs(d) < 0.25 {
					acc += 1 / float64(len(t.eval))
				}
			}
			return map[string]float64{"loss": loss, "acc": acc}, nil
		},
		DataState:   t.data.state,
		RestoreData: t.data.restore,
		ModelConfig: func() ([]byte, error) {
			return json.Marshal(map[string]any{"model_type": "test-mlp", "in": t.m.in, "hidden": t.m.hid})
		},
	}
}

// snapshot copies the parameter values.
func snapshot(ps []*tensor.Tensor) [][]float32 {
	out := make([][]float32, len(ps))
	for i, p := range ps {
		out[i] = append([]float32(nil), p.Data()...)
	}
	return out
}

// assertSameBits fails unless a and b are bit-identical.
func assertSameBits(t *testing.T, what string, a, b [][]float32) {
	t.Helper()
	for i := range a {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				t.Fatalf("%s: tensor %d element %d: %v vs %v", what, i, j, a[i][j], b[i][j])
			}
		}
	}
}

func testConfig(out string, steps int) Config {
	c := DefaultConfig()
	c.Out, c.Steps, c.LR, c.WarmupSteps, c.Seed = out, steps, 3e-2, 3, 42
	c.SaveEvery, c.EvalEvery, c.KeepCheckpoints, c.Progress, c.Plot = 4, 5, 2, "off", false
	c.GradClip = 0.5
	return c
}
