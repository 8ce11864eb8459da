package dflash

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"dflash/data/tokenizer"
	"dflash/internal/atomicfile"
	"dflash/safetensors"
	"dflash/tensor"
)

// WriteDir writes the drafter as an HF-style directory (docs/DRAFTER.md §6):
// config.json and model.safetensors with the parameters in dtype ("F32" or
// "BF16"). The directory appears whole or not at all: it is written under a
// temporary name beside dir and renamed over it.
func (d *Drafter[T]) WriteDir(dir, dtype string) error {
	switch dtype {
	case "F32", "BF16":
	default:
		return fmt.Errorf("export dtype %q: want F32 or BF16", dtype)
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
		data := make([]float32, len(p.Data()))
		for i, v := range p.Data() {
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

// Export writes the drafter as WriteDir does, for serving with the target
// whose tokenizer is tok: dflash_config.mask_token is the mask id's name
// there (MaskTokenName), and an id that disagrees with the tokenizer's
// <|MASK|> is an error naming both ids.
func (d *Drafter[T]) Export(dir, dtype string, tok *tokenizer.Tokenizer) error {
	name, err := MaskTokenName(tok, d.Cfg.MaskTokenID)
	if err != nil {
		return fmt.Errorf("export %s: %w", dir, err)
	}
	d.Cfg.MaskToken = name
	return d.WriteDir(dir, dtype)
}

// LoadDir reads a drafter directory written by WriteDir (or any directory
// with the same config.json fields and parameter names, sharded or not).
// A missing tensor, a shape mismatch or a tensor that is not a float weight
// is an error naming it.
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
	d.rope()
	for _, p := range d.alloc() {
		v := make([]float32, len(p.Data()))
		if err := st.Weight(p.Name, p.Shape, v); err != nil {
			return nil, err
		}
		for i, x := range v {
			p.Data()[i] = T(x)
		}
	}
	return d, nil
}
