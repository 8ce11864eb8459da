package train

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"dflash/safetensors"
	"dflash/tensor"
)

// Optimizer state file names inside a checkpoint directory.
const (
	OptimizerTensorsFile = "optimizer.safetensors"
	OptimizerStateFile   = "optimizer.json"
)

// adamwState is optimizer.json: the hyper-parameters and each parameter's
// step count (all equal: the parameters step together; the per-parameter
// form is the file's since before the state was one count).
type adamwState struct {
	Kind   string           `json:"kind"`
	Config tensor.AdamW     `json:"config"`
	Steps  map[string]int64 `json:"steps"`
}

// Load restores the values (dir/model.safetensors, LoadValues), the moments
// and the step count saved in checkpoint directory dir. Every parameter
// must be present with its shape; the hyper-parameters in the file are
// checked against p's and a difference is an error naming the field.
func (p *Params) Load(dir string) error {
	if err := LoadValues(dir, p.b, p.a); err != nil {
		return err
	}
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
	mine := p.state.Config
	for _, c := range []struct {
		name       string
		file, mine float64
	}{{"beta1", st.Config.Beta1, mine.Beta1}, {"beta2", st.Config.Beta2, mine.Beta2}, {"eps", st.Config.Eps, mine.Eps}, {"weight_decay", st.Config.WeightDecay, mine.WeightDecay}} {
		if c.file != c.mine {
			return fmt.Errorf("%s: %s is %g in the checkpoint but %g now", path, c.name, c.file, c.mine)
		}
	}
	f, err := safetensors.Open(filepath.Join(dir, OptimizerTensorsFile))
	if err != nil {
		return err
	}
	defer f.Close()
	m, v := make([]float32, p.a.Len()), make([]float32, p.a.Len())
	steps := int64(-1)
	for i, t := range p.a.Params() {
		n, ok := st.Steps[t.Name]
		if !ok {
			return fmt.Errorf("%s: no step count for parameter %q", path, t.Name)
		}
		if steps >= 0 && n != steps {
			return fmt.Errorf("%s: parameter %q has taken %d steps, the ones before it %d (the parameters step together)", path, t.Name, n, steps)
		}
		steps = n
		off := p.a.Offset(i)
		for _, mv := range []struct {
			suffix string
			dst    []float32
		}{{".exp_avg", m[off : off+t.Numel()]}, {".exp_avg_sq", v[off : off+t.Numel()]}} {
			if err := readParamTensor(f, t.Name+mv.suffix, t.Shape, mv.dst); err != nil {
				return err
			}
		}
	}
	if len(st.Steps) != len(p.a.Params()) {
		return fmt.Errorf("%s: %d parameters in the checkpoint, %d now", path, len(st.Steps), len(p.a.Params()))
	}
	p.b.WriteAdamState(p.state, m, v)
	p.state.Steps = max(steps, 0)
	return nil
}

// LoadValues reads dir/model.safetensors into arena a on backend b
// (tensor.Arena.SetParam: the master values and the compute copy): every
// parameter must be present as F32 with its shape, and tensors the file
// has beyond the arena's are an error too.
func LoadValues(dir string, b tensor.Backend[float32], a *tensor.Arena[float32]) error {
	f, err := safetensors.Open(filepath.Join(dir, ModelFile))
	if err != nil {
		return err
	}
	defer f.Close()
	ps := a.Params()
	for i, p := range ps {
		host := make([]float32, p.Numel())
		if err := readParamTensor(f, p.Name, p.Shape, host); err != nil {
			return err
		}
		a.SetParam(b, i, host)
	}
	if n := len(f.Names()); n != len(ps) {
		return fmt.Errorf("%s: %d tensors, %d parameters to load", f.Path(), n, len(ps))
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
