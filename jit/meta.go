package jit

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// Meta describes a cached image; it is stored in the file's header in the
// binary layout of appendMeta, which keeps every byte of every string (JSON
// would turn bytes that are not UTF-8 into U+FFFD, and options so changed
// no longer match the source's). The JSON names are those of `dflash cache
// ls --json`.
type Meta struct {
	Family    string            `json:"family"`
	Program   string            `json:"program"`
	Arch      string            `json:"arch"`
	Compiler  string            `json:"compiler"`
	Options   []string          `json:"options,omitempty"`
	Params    map[string]string `json:"params,omitempty"`
	Created   time.Time         `json:"created"`
	CompileMS float64           `json:"compile_ms"`
	Log       string            `json:"log,omitempty"`
}

// Metadata layout (little-endian); a string is its length (uint32) and its
// bytes:
//
//	family, program, arch, compiler  4 strings
//	options                          count (uint32), then each, in order
//	params                           count (uint32), then each name and value,
//	                                 names in strictly increasing byte order
//	created                          Unix seconds (int64), nanoseconds (uint32, < 1e9)
//	compile_ms                       float64 bits (uint64)
//	log                              string
//
// decodeMeta accepts nothing else, so a decoded file encodes back to the
// same bytes.

// metaSize returns the length of meta's encoding.
func metaSize(meta Meta) uint64 {
	n := uint64(4*4 + len(meta.Family) + len(meta.Program) + len(meta.Arch) + len(meta.Compiler))
	n += 4
	for _, o := range meta.Options {
		n += 4 + uint64(len(o))
	}
	n += 4
	for k, v := range meta.Params {
		n += 8 + uint64(len(k)) + uint64(len(v))
	}
	return n + 8 + 4 + 8 + 4 + uint64(len(meta.Log))
}

// appendMeta appends meta's encoding to b; every string must be shorter
// than 4 GiB (encodeFile's limit on the whole is far less).
func appendMeta(b []byte, meta Meta) []byte {
	str := func(s string) {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	str(meta.Family)
	str(meta.Program)
	str(meta.Arch)
	str(meta.Compiler)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(meta.Options)))
	for _, o := range meta.Options {
		str(o)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(meta.Params)))
	for _, k := range slices.Sorted(maps.Keys(meta.Params)) {
		str(k)
		str(meta.Params[k])
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(meta.Created.Unix()))
	b = binary.LittleEndian.AppendUint32(b, uint32(meta.Created.Nanosecond()))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(meta.CompileMS))
	str(meta.Log)
	return b
}

// metaReader takes the fields of an encoded Meta in turn; the first field
// that does not fit sets err, and every later one reads as zero.
type metaReader struct {
	b   []byte
	err error
}

func (r *metaReader) next(n uint64, field string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%s: %d bytes past the end", field, n-uint64(len(r.b)))
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *metaReader) u32(field string) uint32 {
	if p := r.next(4, field); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *metaReader) u64(field string) uint64 {
	if p := r.next(8, field); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (r *metaReader) str(field string) string {
	return string(r.next(uint64(r.u32(field)), field))
}

// decodeMeta decodes the metadata of a cache file; its error names the
// field that is wrong.
func decodeMeta(b []byte) (Meta, error) {
	r := metaReader{b: b}
	var meta Meta
	meta.Family, meta.Program, meta.Arch, meta.Compiler = r.str("family"), r.str("program"), r.str("arch"), r.str("compiler")
	for i, n := uint32(0), r.u32("options"); i < n && r.err == nil; i++ {
		meta.Options = append(meta.Options, r.str("option"))
	}
	var prev string
	for i, n := uint32(0), r.u32("params"); i < n && r.err == nil; i++ {
		k, v := r.str("param name"), r.str("param value")
		if r.err == nil && i > 0 && k <= prev {
			r.err = fmt.Errorf("param name %q after %q: names not in increasing order", k, prev)
		}
		if meta.Params == nil {
			meta.Params = map[string]string{}
		}
		meta.Params[k], prev = v, k
	}
	sec, nsec := int64(r.u64("created")), r.u32("created")
	if r.err == nil && nsec >= 1e9 {
		r.err = fmt.Errorf("created: %d nanoseconds", nsec)
	}
	meta.Created = time.Unix(sec, int64(nsec)).UTC()
	meta.CompileMS = math.Float64frombits(r.u64("compile_ms"))
	meta.Log = r.str("log")
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d bytes after the log", len(r.b))
	}
	return meta, r.err
}
