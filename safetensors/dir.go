package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// IndexFile is the name of the shard index of an HF model directory.
const IndexFile = "model.safetensors.index.json"

// SingleFile is the name of an unsharded HF model's weights.
const SingleFile = "model.safetensors"

// Dir is an HF model directory's weights presented as one name space.
type Dir struct {
	path   string
	files  []*File          // open shards, in name order
	byName map[string]*File // tensor name -> shard holding it
	names  []string
}

// OpenDir opens the weights of the HF model directory dir: the shards that
// model.safetensors.index.json lists in its "weight_map" when that file exists,
// otherwise model.safetensors. Every tensor the index names must be in its shard;
// tensors a shard holds that the index does not name are not exposed.
func OpenDir(dir string) (*Dir, error) {
	d := &Dir{path: dir, byName: map[string]*File{}}
	indexPath := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(indexPath)
	switch {
	case err == nil:
		if err := d.openIndexed(indexPath, raw); err != nil {
			d.Close()
			return nil, err
		}
	case errors.Is(err, fs.ErrNotExist):
		f, err := Open(filepath.Join(dir, SingleFile))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%s: no %s and no %s", dir, IndexFile, SingleFile)
			}
			return nil, err
		}
		d.files = []*File{f}
		for _, n := range f.names {
			d.byName[n] = f
		}
	default:
		return nil, err
	}
	for n := range d.byName {
		d.names = append(d.names, n)
	}
	sort.Strings(d.names)
	return d, nil
}

func (d *Dir) openIndexed(indexPath string, raw []byte) error {
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return fmt.Errorf("%s: %w", indexPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("%s: weight_map is missing or empty", indexPath)
	}
	shards := map[string]*File{}
	var shardNames []string
	for _, s := range idx.WeightMap {
		if _, ok := shards[s]; !ok {
			shards[s] = nil
			shardNames = append(shardNames, s)
		}
	}
	sort.Strings(shardNames)
	for _, s := range shardNames {
		if !filepath.IsLocal(s) {
			return fmt.Errorf("%s: shard file name %q must be a plain name inside the directory", indexPath, s)
		}
		f, err := Open(filepath.Join(d.path, s))
		if err != nil {
			return fmt.Errorf("%s: shard listed in %s: %w", s, IndexFile, err)
		}
		shards[s] = f
		d.files = append(d.files, f)
	}
	for name, s := range idx.WeightMap {
		f := shards[s]
		if _, ok := f.entries[name]; !ok {
			return fmt.Errorf("%s: tensor %q: listed in %s but absent from the shard: %w", f.path, name, IndexFile, ErrNotFound)
		}
		d.byName[name] = f
	}
	return nil
}

// Path returns the directory path.
func (d *Dir) Path() string { return d.path }

// Close closes every shard.
func (d *Dir) Close() error {
	var first error
	for _, f := range d.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Names returns all tensor names in sorted order.
func (d *Dir) Names() []string { return append([]string(nil), d.names...) }

// Info returns the dtype and shape of the named tensor.
func (d *Dir) Info(name string) (Info, bool) {
	f, ok := d.byName[name]
	if !ok {
		return Info{}, false
	}
	return f.Info(name)
}

// File returns the shard holding the named tensor.
func (d *Dir) File(name string) (*File, bool) {
	f, ok := d.byName[name]
	return f, ok
}

// Float32 reads the named tensor from its shard and converts it to float32.
func (d *Dir) Float32(name string) ([]float32, error) {
	f, ok := d.byName[name]
	if !ok {
		return nil, fmt.Errorf("%s: tensor %q: %w", d.path, name, ErrNotFound)
	}
	return f.Float32(name)
}

// Float32Into reads the named tensor into dst, which must have exactly as many elements.
func (d *Dir) Float32Into(name string, dst []float32) error {
	f, ok := d.byName[name]
	if !ok {
		return fmt.Errorf("%s: tensor %q: %w", d.path, name, ErrNotFound)
	}
	return f.Float32Into(name, dst)
}

// Weight reads the model weight name into dst as float32. The tensor must
// exist, have shape (what the model's config implies) and a float dtype
// (File.WeightInto). Errors name the directory or the file, and the tensor.
func (d *Dir) Weight(name string, shape []int, dst []float32) error {
	w, err := d.RawWeight(name, shape)
	if err != nil {
		return err
	}
	return w.file.Float32Into(name, dst)
}

// Bytes returns the raw little-endian bytes of the named tensor.
func (d *Dir) Bytes(name string) ([]byte, error) {
	f, ok := d.byName[name]
	if !ok {
		return nil, fmt.Errorf("%s: tensor %q: %w", d.path, name, ErrNotFound)
	}
	return f.Bytes(name)
}

// Metadata returns the union of the shards' "__metadata__" maps (a later shard, in
// file name order, wins on a conflicting key).
func (d *Dir) Metadata() map[string]string {
	var m map[string]string
	for _, f := range d.files {
		for k, v := range f.metadata {
			if m == nil {
				m = map[string]string{}
			}
			m[k] = v
		}
	}
	return m
}
