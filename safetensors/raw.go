package safetensors

import (
	"fmt"
	"slices"

	"dflash/dtype"
)

// RawWeight is a model weight's place in its file: the shard, the dtype
// and the byte range of its little-endian elements, as Dir.RawWeight
// checked them. Its bytes are read in pieces with ReadAt, from several
// goroutines at once if need be, and handed on as they are (to a device
// that stores that dtype) or converted by the reader.
type RawWeight struct {
	Name       string
	DType      dtype.DType
	Shape      []int
	file       *File
	begin, end int64 // absolute file offsets
}

// RawWeight checks the model weight name as Weight does (present, of
// shape, a float dtype) and returns where its bytes lie. Errors are
// Weight's: they name the directory or the file, and the tensor.
func (d *Dir) RawWeight(name string, shape []int) (RawWeight, error) {
	f, ok := d.byName[name]
	if !ok {
		return RawWeight{}, fmt.Errorf("%s: tensor %q is missing", d.path, name)
	}
	e := f.entries[name]
	if !slices.Equal(e.Shape, shape) {
		return RawWeight{}, fmt.Errorf("%s: tensor %q has shape %v, config.json implies %v", d.path, name, e.Shape, shape)
	}
	if err := f.checkWeight(name, e); err != nil {
		return RawWeight{}, err
	}
	return RawWeight{Name: name, DType: e.dt, Shape: slices.Clone(e.Shape), file: f, begin: e.begin, end: e.end}, nil
}

// File returns the path of the shard that holds the weight.
func (w RawWeight) File() string { return w.file.path }

// Size returns the weight's size in bytes.
func (w RawWeight) Size() int64 { return w.end - w.begin }

// Offset returns where the weight's bytes begin in its file (readers that
// go through a file in order sort by it).
func (w RawWeight) Offset() int64 { return w.begin }

// ReadAt reads the bytes [off, off+len(buf)) of the weight's data into
// buf. A range outside the weight, and a file that ends early (truncated
// since it was opened) or cannot be read, is an error naming the file and
// the tensor.
func (w RawWeight) ReadAt(buf []byte, off int64) error {
	if off < 0 || off+int64(len(buf)) > w.Size() {
		return fmt.Errorf("%s: tensor %q: bytes [%d, %d) are outside its %d bytes", w.file.path, w.Name, off, off+int64(len(buf)), w.Size())
	}
	return w.file.readAt(w.Name, buf, w.begin+off)
}
