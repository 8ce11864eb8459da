package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
	"sort"

	"dflash/dtype"
)

// MaxHeaderSize bounds the JSON header (100 MB, as the reference implementation does).
const MaxHeaderSize = 100 << 20

// ErrNotFound is returned (wrapped) when a tensor name is not in a file or directory.
var ErrNotFound = errors.New("tensor not found")

// FormatError reports a file that is not valid safetensors. Tensor is empty when the
// fault is not tied to one tensor.
type FormatError struct {
	File   string
	Tensor string
	Reason string
}

func (e *FormatError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("%s: tensor %q: %s", e.File, e.Tensor, e.Reason)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Reason)
}

// Info describes one tensor: its dtype name ("BF16", "F32", ...) and shape.
type Info struct {
	DType string
	Shape []int
}

// Numel returns the number of elements of the tensor (1 for a scalar).
func (i Info) Numel() int {
	n := 1
	for _, d := range i.Shape {
		n *= d
	}
	return n
}

type entry struct {
	Info
	dt         dtype.DType // Info.DType parsed
	begin, end int64       // absolute file offsets
}

// File is an open safetensors file whose header has been parsed and validated.
type File struct {
	path     string
	f        *os.File
	entries  map[string]entry
	names    []string
	metadata map[string]string
}

// Open opens and validates the safetensors file at path.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	sf := &File{path: path, f: f}
	if err := sf.parseHeader(st.Size()); err != nil {
		f.Close()
		return nil, err
	}
	return sf, nil
}

func (sf *File) formatErr(tensor, format string, args ...any) error {
	return &FormatError{File: sf.path, Tensor: tensor, Reason: fmt.Sprintf(format, args...)}
}

type rawEntry struct {
	DType       string    `json:"dtype"`
	Shape       []int64   `json:"shape"`
	DataOffsets *[2]int64 `json:"data_offsets"`
}

func (sf *File) parseHeader(size int64) error {
	if size < 8 {
		return sf.formatErr("", "file is %d bytes, shorter than the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if _, err := sf.f.ReadAt(lenBuf[:], 0); err != nil {
		return fmt.Errorf("%s: read header length: %w", sf.path, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return sf.formatErr("", "header length %d exceeds the limit %d", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return sf.formatErr("", "header length %d exceeds the %d bytes after the length field (truncated file?)", n, size-8)
	}
	hdr := make([]byte, n)
	if _, err := sf.f.ReadAt(hdr, 8); err != nil {
		return fmt.Errorf("%s: read header: %w", sf.path, err)
	}
	trimmed := bytes.TrimLeft(hdr, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return sf.formatErr("", "header is not a JSON object")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return sf.formatErr("", "header JSON: %v", err)
	}
	dataStart := int64(8 + n)
	dataLen := size - dataStart
	sf.entries = make(map[string]entry, len(raw))
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &sf.metadata); err != nil {
				return sf.formatErr("", "__metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		var re rawEntry
		if err := json.Unmarshal(msg, &re); err != nil {
			return sf.formatErr(name, "entry: %v", err)
		}
		e, err := sf.checkEntry(name, re, dataLen)
		if err != nil {
			return err
		}
		e.begin += dataStart
		e.end += dataStart
		sf.entries[name] = e
		sf.names = append(sf.names, name)
	}
	sort.Strings(sf.names)
	// Spans must not overlap: sort by begin and compare neighbours.
	byBegin := append([]string(nil), sf.names...)
	sort.SliceStable(byBegin, func(i, j int) bool {
		a, b := sf.entries[byBegin[i]], sf.entries[byBegin[j]]
		return a.begin < b.begin || a.begin == b.begin && a.end < b.end
	})
	for i := 1; i < len(byBegin); i++ {
		prev, cur := sf.entries[byBegin[i-1]], sf.entries[byBegin[i]]
		if cur.begin < prev.end {
			return sf.formatErr(byBegin[i], "data_offsets [%d, %d] overlap tensor %q at [%d, %d]",
				cur.begin-dataStart, cur.end-dataStart, byBegin[i-1], prev.begin-dataStart, prev.end-dataStart)
		}
	}
	return nil
}

func (sf *File) checkEntry(name string, re rawEntry, dataLen int64) (entry, error) {
	if re.DType == "" {
		return entry{}, sf.formatErr(name, "missing dtype")
	}
	dt, ok := dtype.FromSafetensors(re.DType)
	if !ok {
		return entry{}, sf.formatErr(name, "unknown dtype %q", re.DType)
	}
	if re.Shape == nil {
		return entry{}, sf.formatErr(name, "missing shape")
	}
	if re.DataOffsets == nil {
		return entry{}, sf.formatErr(name, "missing data_offsets")
	}
	shape := make([]int, len(re.Shape))
	need := uint64(dt.Size())
	for i, d := range re.Shape {
		if d < 0 {
			return entry{}, sf.formatErr(name, "negative dimension in shape %v", re.Shape)
		}
		hi, lo := bits.Mul64(need, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return entry{}, sf.formatErr(name, "shape %v overflows", re.Shape)
		}
		need = lo
		shape[i] = int(d)
	}
	begin, end := re.DataOffsets[0], re.DataOffsets[1]
	if begin < 0 || end < begin {
		return entry{}, sf.formatErr(name, "data_offsets [%d, %d] are not an increasing pair", begin, end)
	}
	if end > dataLen {
		return entry{}, sf.formatErr(name, "data_offsets [%d, %d] run past the end of the data (%d bytes; truncated file?)", begin, end, dataLen)
	}
	if uint64(end-begin) != need {
		return entry{}, sf.formatErr(name, "%s shape %v needs %d bytes, data_offsets span %d", re.DType, shape, need, end-begin)
	}
	return entry{Info: Info{DType: re.DType, Shape: shape}, dt: dt, begin: begin, end: end}, nil
}

// Path returns the path the file was opened with.
func (sf *File) Path() string { return sf.path }

// Close closes the underlying file.
func (sf *File) Close() error { return sf.f.Close() }

// Names returns the tensor names in sorted order.
func (sf *File) Names() []string { return append([]string(nil), sf.names...) }

// Info returns the dtype and shape of the named tensor.
func (sf *File) Info(name string) (Info, bool) {
	e, ok := sf.entries[name]
	if !ok {
		return Info{}, false
	}
	return Info{DType: e.DType, Shape: slices.Clone(e.Shape)}, true
}

// Metadata returns a copy of the header's "__metadata__" map (nil when absent).
func (sf *File) Metadata() map[string]string {
	if sf.metadata == nil {
		return nil
	}
	m := make(map[string]string, len(sf.metadata))
	for k, v := range sf.metadata {
		m[k] = v
	}
	return m
}

// Bytes returns the raw little-endian bytes of the named tensor.
func (sf *File) Bytes(name string) ([]byte, error) {
	e, ok := sf.entries[name]
	if !ok {
		return nil, fmt.Errorf("%s: tensor %q: %w", sf.path, name, ErrNotFound)
	}
	buf := make([]byte, e.end-e.begin)
	if err := sf.readAt(name, buf, e.begin); err != nil {
		return nil, err
	}
	return buf, nil
}

func (sf *File) readAt(name string, buf []byte, off int64) error {
	if _, err := sf.f.ReadAt(buf, off); err != nil {
		if errors.Is(err, io.EOF) {
			return sf.formatErr(name, "data ends early (file truncated while open?)")
		}
		return fmt.Errorf("%s: tensor %q: %w", sf.path, name, err)
	}
	return nil
}

// readChunk is the most bytes read at once while converting a tensor.
const readChunk = 4 << 20

// Float32 reads the named tensor and converts it to float32. Floating dtypes (F64,
// F32, BF16, F16, F8_E4M3, F8_E5M2) convert by value, rounding F64 to nearest;
// integer and BOOL tensors convert by value too.
func (sf *File) Float32(name string) ([]float32, error) {
	e, ok := sf.entries[name]
	if !ok {
		return nil, fmt.Errorf("%s: tensor %q: %w", sf.path, name, ErrNotFound)
	}
	return sf.readFloat32(name, e, make([]float32, e.Numel()))
}

// Float32Into reads the named tensor into dst, which must have exactly as many elements.
func (sf *File) Float32Into(name string, dst []float32) error {
	e, ok := sf.entries[name]
	if !ok {
		return fmt.Errorf("%s: tensor %q: %w", sf.path, name, ErrNotFound)
	}
	if len(dst) != e.Numel() {
		return fmt.Errorf("%s: tensor %q: shape %v has %d elements, destination has %d", sf.path, name, e.Shape, e.Numel(), len(dst))
	}
	_, err := sf.readFloat32(name, e, dst)
	return err
}

// weightDTypes are the dtypes WeightInto reads as weights.
var weightDTypes = []dtype.DType{dtype.F32, dtype.BF16, dtype.F16, dtype.F64}

// WeightInto reads the named tensor, a floating-point weight (F32, BF16, F16 or F64),
// into dst as Float32Into does. A tensor of another dtype is an error naming the
// tensor and the file: integers and booleans are not weights, and FP8 values need
// scales kept elsewhere, so converting them by value would load wrong weights
// silently.
func (sf *File) WeightInto(name string, dst []float32) error {
	e, ok := sf.entries[name]
	if !ok {
		return fmt.Errorf("%s: tensor %q: %w", sf.path, name, ErrNotFound)
	}
	if err := sf.checkWeight(name, e); err != nil {
		return err
	}
	return sf.Float32Into(name, dst)
}

// checkWeight refuses a tensor whose dtype is not a weight's (weightDTypes).
func (sf *File) checkWeight(name string, e entry) error {
	if !slices.Contains(weightDTypes, e.dt) {
		return fmt.Errorf("%s: tensor %q has dtype %s; a float weight is expected (F32, BF16, F16 or F64)", sf.path, name, e.DType)
	}
	return nil
}

func (sf *File) readFloat32(name string, e entry, dst []float32) ([]float32, error) {
	esize := int64(e.dt.Size())
	perChunk := readChunk / esize
	buf := make([]byte, min(e.end-e.begin, perChunk*esize))
	for i := int64(0); i < int64(len(dst)); i += perChunk {
		n := min(perChunk, int64(len(dst))-i)
		b := buf[:n*esize]
		if err := sf.readAt(name, b, e.begin+i*esize); err != nil {
			return nil, err
		}
		dtype.DecodeFloat32(e.dt, dst[i:i+n], b)
	}
	return dst, nil
}
