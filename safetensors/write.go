package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"dflash/dtype"
	"dflash/internal/atomicfile"
)

// Tensor is one tensor to write: Data holds the values, converted on write to DType
// ("F32", "BF16", "F16" or "F64"; empty means "F32"). BF16 and F16 round to nearest even.
// Raw, when not nil, holds the tensor's little-endian bytes in DType (any dtype this
// package reads), written as they are; Data is then not used.
type Tensor struct {
	Name  string
	Shape []int
	DType string
	Data  []float32
	Raw   []byte
}

// Encode writes tensors (in name order) and string metadata in safetensors format to w.
// The header is padded with spaces to a multiple of 8 bytes so that data starts aligned.
func Encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	ts := append([]Tensor(nil), tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	var hdr strings.Builder
	hdr.WriteByte('{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		hdr.WriteString(`"__metadata__":{`)
		for i, k := range keys {
			if i > 0 {
				hdr.WriteByte(',')
			}
			hdr.WriteString(jsonString(k) + ":" + jsonString(metadata[k]))
		}
		hdr.WriteByte('}')
	}
	var off int64
	for i, t := range ts {
		if t.Name == "" || t.Name == "__metadata__" {
			return fmt.Errorf("safetensors: tensor name %q is not allowed", t.Name)
		}
		if i > 0 && ts[i-1].Name == t.Name {
			return fmt.Errorf("safetensors: tensor %q appears twice", t.Name)
		}
		dt, ok := t.dtype()
		if !ok || t.Raw == nil && !dtype.CanEncode(dt) {
			return fmt.Errorf("safetensors: tensor %q: cannot write dtype %q (F32, BF16, F16, F64 are supported; raw bytes of any dtype read here)", t.Name, t.DType)
		}
		esize, n := dt.Size(), 1
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("safetensors: tensor %q: negative dimension in shape %v", t.Name, t.Shape)
			}
			n *= d
		}
		if t.Raw != nil && len(t.Raw) != n*esize {
			return fmt.Errorf("safetensors: tensor %q: shape %v of %s needs %d bytes, raw data has %d", t.Name, t.Shape, dt.Safetensors(), n*esize, len(t.Raw))
		}
		if t.Raw == nil && n != len(t.Data) {
			return fmt.Errorf("safetensors: tensor %q: shape %v has %d elements, data has %d", t.Name, t.Shape, n, len(t.Data))
		}
		if len(metadata) > 0 || i > 0 {
			hdr.WriteByte(',')
		}
		shape := make([]string, len(t.Shape))
		for j, d := range t.Shape {
			shape[j] = strconv.Itoa(d)
		}
		end := off + int64(n*esize)
		fmt.Fprintf(&hdr, `%s:{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}`,
			jsonString(t.Name), dt.Safetensors(), strings.Join(shape, ","), off, end)
		off = end
	}
	hdr.WriteByte('}')
	h := hdr.String()
	if pad := (8 - (8+len(h))%8) % 8; pad > 0 {
		h += strings.Repeat(" ", pad)
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(h)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := io.WriteString(w, h); err != nil {
		return err
	}
	var buf []byte
	for _, t := range ts {
		if t.Raw != nil {
			if _, err := w.Write(t.Raw); err != nil {
				return err
			}
			continue
		}
		dt, _ := t.dtype()
		esize := dt.Size()
		for i := 0; i < len(t.Data); i += encodeChunk {
			part := t.Data[i:min(i+encodeChunk, len(t.Data))]
			var b []byte
			if dt == dtype.F32 && f32InPlace {
				b = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(part))), 4*len(part))
			} else {
				if cap(buf) < len(part)*esize {
					buf = make([]byte, len(part)*esize)
				}
				b = buf[:len(part)*esize]
				dtype.EncodeFloat32(dt, b, part)
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// encodeChunk is how many elements of a tensor Encode hands w at once
// (converted into a buffer of this size, or F32 viewed in place): small
// enough that a tee's hashing interleaves with the writing of a large
// tensor, large enough that the calls cost nothing.
const encodeChunk = 1 << 20

// f32InPlace says that Encode writes F32 tensors' Data as the memory of
// the []float32 (no copy: on a little-endian host it is the file's bytes);
// a test turns it off to compare with the element-by-element encoding.
var f32InPlace = dtype.HostLittleEndian

// dtype returns the type t.DType names (F32 when empty), and false for a name
// the format does not define.
func (t Tensor) dtype() (dtype.DType, bool) {
	if t.DType == "" {
		return dtype.F32, true
	}
	return dtype.FromSafetensors(t.DType)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Write writes tensors and metadata to path atomically (see dflash/internal/atomicfile):
// into a temporary file in the same directory, synced, then renamed over path, and the
// directory synced. A crash leaves either the old file or the new one, never a partial
// file at path. Files of many GB go faster through atomicfile's WriteBlocks with Encode.
func Write(path string, tensors []Tensor, metadata map[string]string) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		if err := Encode(bw, tensors, metadata); err != nil {
			return err
		}
		return bw.Flush()
	})
}
