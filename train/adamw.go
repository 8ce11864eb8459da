package train

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"dflash/internal/atomicfile"
	"dflash/safetensors"
)

// AdamWConfig holds AdamW's hyper-parameters; the learning rate is given per step.
type AdamWConfig struct {
	Beta1       float64 `json:"beta1"`
	Beta2       float64 `json:"beta2"`
	Eps         float64 `json:"eps"`
	WeightDecay float64 `json:"weight_decay"`
	// NoDecay reports parameters that take no weight decay; nil means DefaultNoDecay.
	NoDecay func(*Param) bool `json:"-"`
}

// AdamW is Adam with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW
// computes it. For parameter p with gradient g at its t-th step, learning rate lr:
//
//	p <- p * (1 - lr*wd)                    (only for parameters that decay)
//	m <- b1*m + (1-b1)*g
//	v <- b2*v + (1-b2)*g^2
//	p <- p - (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
//
// m, v and p are stored in float32; the update is computed in float64.
//
// The moments live in two flat buffers laid out like the parameters, one range per
// parameter in the order given (the layout of a model's parameter arena, see
// tensor.Arena), and Step is one pass over that flat index space with a table of
// ranges saying where each parameter starts, whether it decays (norms and biases do
// not) and its step count: the shape of a fused device kernel. When the parameters are
// views of one arena, values and gradients are read from that one buffer too.
type AdamW struct {
	cfg    AdamWConfig
	params []*Param
	offs   []int // offs[i]: start of parameter i in the flat index space
	mFlat  []float32
	vFlat  []float32
	m, v   [][]float32 // parameter i's range of mFlat and vFlat
	steps  []int64
	decay  []bool
}

// NewAdamW returns an optimizer over params with zero moments.
func NewAdamW(params []*Param, cfg AdamWConfig) *AdamW {
	checkParams(params, false)
	if cfg.NoDecay == nil {
		cfg.NoDecay = DefaultNoDecay
	}
	o := &AdamW{cfg: cfg, params: params}
	total := 0
	for _, p := range params {
		o.offs = append(o.offs, total)
		total += len(p.Data)
		o.steps = append(o.steps, 0)
		o.decay = append(o.decay, cfg.WeightDecay != 0 && !cfg.NoDecay(p))
	}
	o.mFlat, o.vFlat = make([]float32, total), make([]float32, total)
	for i, p := range params {
		lo, hi := o.offs[i], o.offs[i]+len(p.Data)
		o.m = append(o.m, o.mFlat[lo:hi:hi])
		o.v = append(o.v, o.vFlat[lo:hi:hi])
	}
	return o
}

// Decays reports whether the named parameter takes weight decay.
func (o *AdamW) Decays(name string) bool {
	for i, p := range o.params {
		if p.Name == name {
			return o.decay[i]
		}
	}
	return false
}

// Steps returns the number of updates applied to the named parameter.
func (o *AdamW) Steps(name string) int64 {
	for i, p := range o.params {
		if p.Name == name {
			return o.steps[i]
		}
	}
	return 0
}

// parallelMin is the element count below which Step stays on one goroutine, and the
// size of the chunks of the flat index space that goroutines take.
const parallelMin = 1 << 16

// Step applies one update with learning rate lr to every parameter, using its Grad.
func (o *AdamW) Step(lr float64) {
	for i := range o.steps {
		o.steps[i]++
	}
	total := len(o.mFlat)
	if total < parallelMin {
		o.update(0, total, lr)
		return
	}
	var wg sync.WaitGroup
	ch := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for lo := range ch {
				o.update(lo, min(total, lo+parallelMin), lr)
			}
		})
	}
	for lo := 0; lo < total; lo += parallelMin {
		ch <- lo
	}
	close(ch)
	wg.Wait()
}

// update applies the step to the flat range [lo, hi), parameter range by parameter
// range.
func (o *AdamW) update(lo, hi int, lr float64) {
	first, _ := slices.BinarySearch(o.offs, lo+1) // parameters starting at or before lo
	for i := max(first-1, 0); i < len(o.params) && o.offs[i] < hi; i++ {
		off := o.offs[i]
		a, b := max(lo, off), min(hi, off+len(o.params[i].Data))
		if a < b {
			o.updateRange(i, a-off, b-off, lr)
		}
	}
}

// AdamWScalars returns the per-step scalars of the update at step t (counted
// from 1) with learning rate lr: the step size lr/(1−β1^t), sqrt(1−β2^t), and
// the decoupled weight-decay factor 1−lr·λ for parameters that decay. Every
// implementation of the update (this one, the device kernel) takes them from
// here, so that their results stay equal.
func AdamWScalars(c AdamWConfig, lr float64, t int64) (stepSize, bc2Sqrt, shrink float64) {
	tf := float64(t)
	return lr / (1 - math.Pow(c.Beta1, tf)), math.Sqrt(1 - math.Pow(c.Beta2, tf)), 1 - lr*c.WeightDecay
}

// updateRange applies the step to elements [lo, hi) of parameter i.
func (o *AdamW) updateRange(i, lo, hi int, lr float64) {
	p, m, v := o.params[i], o.m[i], o.v[i]
	b1, b2, eps := o.cfg.Beta1, o.cfg.Beta2, o.cfg.Eps
	stepSize, bc2Sqrt, shrink := AdamWScalars(o.cfg, lr, o.steps[i])
	if !o.decay[i] {
		shrink = 1
	}
	for j := lo; j < hi; j++ {
		g := float64(p.Grad[j])
		w := float64(p.Data[j]) * shrink
		mj := b1*float64(m[j]) + (1-b1)*g
		vj := b2*float64(v[j]) + (1-b2)*g*g
		m[j], v[j] = float32(mj), float32(vj)
		w -= stepSize * float64(m[j]) / (math.Sqrt(float64(v[j]))/bc2Sqrt + eps)
		p.Data[j] = float32(w)
	}
}

// Optimizer state file names inside a checkpoint directory.
const (
	OptimizerTensorsFile = "optimizer.safetensors"
	OptimizerStateFile   = "optimizer.json"
)

type adamwState struct {
	Kind   string           `json:"kind"`
	Config AdamWConfig      `json:"config"`
	Steps  map[string]int64 `json:"steps"`
}

// Save writes the moments to dir/optimizer.safetensors and the hyper-parameters and
// per-parameter step counts to dir/optimizer.json (each file synced).
func (o *AdamW) Save(dir string) error {
	var ts []safetensors.Tensor
	st := adamwState{Kind: "adamw", Config: o.cfg, Steps: map[string]int64{}}
	for i, p := range o.params {
		ts = append(ts,
			safetensors.Tensor{Name: p.Name + ".exp_avg", Shape: p.Shape, Data: o.m[i]},
			safetensors.Tensor{Name: p.Name + ".exp_avg_sq", Shape: p.Shape, Data: o.v[i]})
		st.Steps[p.Name] = o.steps[i]
	}
	if err := safetensors.Write(filepath.Join(dir, OptimizerTensorsFile), ts, map[string]string{"optimizer": "adamw"}); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, OptimizerStateFile), b)
}

// Load restores moments and step counts saved by Save. Every parameter must be present
// with its shape; the hyper-parameters in the file are checked against o's and a
// difference is an error naming the field.
func (o *AdamW) Load(dir string) error {
	path := filepath.Join(dir, OptimizerStateFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var st adamwState
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.Kind != "adamw" {
		return fmt.Errorf("%s: optimizer kind %q, want adamw", path, st.Kind)
	}
	for _, c := range []struct {
		name       string
		file, mine float64
	}{{"beta1", st.Config.Beta1, o.cfg.Beta1}, {"beta2", st.Config.Beta2, o.cfg.Beta2}, {"eps", st.Config.Eps, o.cfg.Eps}, {"weight_decay", st.Config.WeightDecay, o.cfg.WeightDecay}} {
		if c.file != c.mine {
			return fmt.Errorf("%s: %s is %g in the checkpoint but %g now", path, c.name, c.file, c.mine)
		}
	}
	f, err := safetensors.Open(filepath.Join(dir, OptimizerTensorsFile))
	if err != nil {
		return err
	}
	defer f.Close()
	for i, p := range o.params {
		n, ok := st.Steps[p.Name]
		if !ok {
			return fmt.Errorf("%s: no step count for parameter %q", path, p.Name)
		}
		for _, mv := range []struct {
			suffix string
			dst    []float32
		}{{".exp_avg", o.m[i]}, {".exp_avg_sq", o.v[i]}} {
			if err := readParamTensor(f, p.Name+mv.suffix, p.Shape, mv.dst); err != nil {
				return err
			}
		}
		o.steps[i] = n
	}
	if len(st.Steps) != len(o.params) {
		return fmt.Errorf("%s: %d parameters in the checkpoint, %d now", path, len(st.Steps), len(o.params))
	}
	return nil
}

// readParamTensor reads tensor name, which must be F32 with the given shape, into dst.
func readParamTensor(f *safetensors.File, name string, shape []int, dst []float32) error {
	info, ok := f.Info(name)
	if !ok {
		return fmt.Errorf("%s: tensor %q: %w", f.Path(), name, safetensors.ErrNotFound)
	}
	if info.DType != "F32" || !slices.Equal(info.Shape, shape) {
		return fmt.Errorf("%s: tensor %q: %s %v, want F32 %v", f.Path(), name, info.DType, info.Shape, shape)
	}
	return f.Float32Into(name, dst)
}
