package dflash

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"dflash/internal/atomicfile"
	"dflash/safetensors"
	"dflash/tensor"
	"dflash/train"
)

// WriteDir writes the drafter as an HF-style directory (docs/DRAFTER.md §6):
// config.json and model.safetensors with the parameters in dtype ("F32" or
// "BF16"). The directory appears whole or not at all: it is written under a
// temporary name beside dir and renamed over it.
func (d *Drafter[T]) WriteDir(dir, dtype string) error {
	switch dtype {
	case "F32", "BF16":
	default:
		return fmt.Errorf("dflash: export dtype %q (F32 or BF16)", dtype)
	}
	cfg := *d.Cfg
	cfg.DType = map[string]string{"F32": "float32", "BF16": "bfloat16"}[dtype]
	cj, err := cfg.MarshalJSON()
	if err != nil {
		return err
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := atomicfile.WriteFile(filepath.Join(tmp, "config.json"), append(cj, '\n')); err != nil {
		return err
	}
	var ts []safetensors.Tensor
	for _, p := range d.Params() {
		data := make([]float32, len(p.Data))
		for i, v := range p.Data {
			data[i] = float32(v)
		}
		ts = append(ts, safetensors.Tensor{Name: p.Name, Shape: slices.Clone(p.Shape), DType: dtype, Data: data})
	}
	if err := safetensors.Write(filepath.Join(tmp, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	old := ""
	if _, err := os.Stat(dir); err == nil {
		old = tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	if old != "" {
		os.RemoveAll(old)
	}
	return atomicfile.SyncDir(parent)
}

// LoadDir reads a drafter directory written by WriteDir (or any directory
// with the same config.json fields and parameter names, sharded or not).
// Missing tensors, shape mismatches and tensors that are not float weights
// (safetensors.Dir.WeightInto) are errors naming the tensor.
func LoadDir[T tensor.Float](dir string) (*Drafter[T], error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	d := &Drafter[T]{Cfg: cfg}
	for _, p := range d.alloc() {
		info, ok := st.Info(p.Name)
		if !ok {
			return nil, fmt.Errorf("%s: tensor %q missing", dir, p.Name)
		}
		if !slices.Equal(info.Shape, p.Shape) {
			return nil, fmt.Errorf("%s: tensor %q has shape %v, config.json implies %v", dir, p.Name, info.Shape, p.Shape)
		}
		v := make([]float32, len(p.Data))
		if err := st.WeightInto(p.Name, v); err != nil {
			return nil, err
		}
		for i, x := range v {
			p.Data[i] = T(x)
		}
	}
	return d, nil
}

// TrainParams returns the float32 parameters as train.Params sharing their
// values and gradients, for the optimizer and checkpoints.
func (d *Drafter[T]) TrainParams() []*train.Param {
	var out []*train.Param
	for _, p := range d.Params() {
		data, ok := any(p.Data).([]float32)
		if !ok {
			panic("dflash: TrainParams needs a float32 drafter")
		}
		grad := any(p.EnsureGrad()).([]float32)
		out = append(out, &train.Param{Name: p.Name, Shape: slices.Clone(p.Shape), Data: data, Grad: grad})
	}
	return out
}
