package train

import (
	"encoding/json"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"

	"dflash/internal/atomicfile"
	"dflash/safetensors"
	"dflash/tensor"
)

// paramSnapshot is what a checkpoint holds of a Params, in host memory: the
// master values, AdamW's two moments and step count, and the arena's
// layout, so that the files can be written from it while training goes on
// (the snapshot is a copy: later steps do not reach it).
type paramSnapshot struct {
	values, m, v []float32
	steps        int64
	config       tensor.AdamW
	layout       []paramSpan
}

// paramSpan is one parameter's place in the flat buffers.
type paramSpan struct {
	name  string
	shape []int
	off   int
}

// newSnapshot returns an empty snapshot of p's layout whose three flat
// buffers come from alloc (Backend.AllocHost for a run's snapshots, which
// it takes again and again into the same buffers).
func (p *Params) newSnapshot(alloc func(n int) ([]float32, error)) (*paramSnapshot, error) {
	s := &paramSnapshot{config: p.state.Config}
	for i, t := range p.a.Params() {
		s.layout = append(s.layout, paramSpan{name: t.Name, shape: slices.Clone(t.Shape), off: p.a.Offset(i)})
	}
	for _, buf := range []*[]float32{&s.values, &s.m, &s.v} {
		var err error
		if *buf, err = alloc(p.a.Len()); err != nil {
			s.free(p.b)
			return nil, err
		}
	}
	return s, nil
}

// hostSnapshot returns a snapshot of p in fresh Go memory (SaveCheckpoint).
func (p *Params) hostSnapshot() *paramSnapshot {
	s, _ := p.newSnapshot(func(n int) ([]float32, error) { return make([]float32, n), nil })
	p.take(s)
	return s
}

// take copies p's master values, moments and step count into s: one
// Download per flat buffer, waiting for the queued work on a device.
func (p *Params) take(s *paramSnapshot) {
	p.b.Download(p.a.Values, s.values)
	p.b.Download(p.state.M, s.m)
	p.b.Download(p.state.V, s.v)
	s.steps = p.state.Steps
}

// free gives s's buffers back to b (Backend.FreeHost).
func (s *paramSnapshot) free(b tensor.Backend[float32]) error {
	var first error
	for _, buf := range []*[]float32{&s.values, &s.m, &s.v} {
		if *buf == nil {
			continue
		}
		if err := b.FreeHost(*buf); err != nil && first == nil {
			first = err
		}
		*buf = nil
	}
	return first
}

// bytes returns the size of the snapshot's flat buffers.
func (s *paramSnapshot) bytes() int64 { return snapshotBytes(len(s.values)) }

// snapshotBytes returns the size of the snapshot of n parameters: three
// float32 buffers.
func snapshotBytes(n int) int64 { return 3 * 4 * int64(n) }

// tensors returns flat's range of every parameter as a tensor named after
// it with suffix.
func (s *paramSnapshot) tensors(flat []float32, suffix string) []safetensors.Tensor {
	ts := make([]safetensors.Tensor, len(s.layout))
	for i, p := range s.layout {
		n := 1
		for _, d := range p.shape {
			n *= d
		}
		ts[i] = safetensors.Tensor{Name: p.name + suffix, Shape: p.shape, DType: "F32", Data: flat[p.off : p.off+n]}
	}
	return ts
}

// saveValues writes the master values to path (model.safetensors), F32,
// and returns the file's size and checksum, computed as it is written.
func (s *paramSnapshot) saveValues(path string) (FileSum, error) {
	return writeSummed(path, s.tensors(s.values, ""), map[string]string{"format": "pt"})
}

// saveOptimizer writes the moments to dir/optimizer.safetensors
// (NAME.exp_avg and NAME.exp_avg_sq for every parameter, in order), whose
// size and checksum it returns, and the hyper-parameters and step counts to
// dir/optimizer.json (each file synced).
func (s *paramSnapshot) saveOptimizer(dir string) (FileSum, error) {
	ms, vs := s.tensors(s.m, ".exp_avg"), s.tensors(s.v, ".exp_avg_sq")
	var ts []safetensors.Tensor
	st := adamwState{Kind: "adamw", Config: s.config, Steps: map[string]int64{}}
	for i, p := range s.layout {
		ts = append(ts, ms[i], vs[i])
		st.Steps[p.name] = s.steps
	}
	sum, err := writeSummed(filepath.Join(dir, OptimizerTensorsFile), ts, map[string]string{"optimizer": "adamw"})
	if err != nil {
		return sum, err
	}
	b, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return sum, err
	}
	return sum, atomicfile.WriteFile(filepath.Join(dir, OptimizerStateFile), b)
}

// writeSummed writes tensors to path in safetensors format, atomically and
// synced, in large blocks around the page cache (atomicfile's WriteBlocks:
// the checkpoint's two large files go at the disk's speed), and returns the
// file's size and CRC-32C, computed from the bytes as they go out rather
// than by reading the file again.
func writeSummed(path string, ts []safetensors.Tensor, metadata map[string]string) (FileSum, error) {
	h := crc32.New(castagnoli)
	err := atomicfile.Options{}.WriteBlocks(path, func(w io.Writer) error {
		return safetensors.Encode(io.MultiWriter(w, h), ts, metadata)
	})
	if err != nil {
		return FileSum{}, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return FileSum{}, err
	}
	return FileSum{Size: fi.Size(), CRC32C: h.Sum32()}, nil
}
