package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"dflash/dtype"
	"dflash/internal/testseed"
)

func newRNG(t *testing.T) *rand.Rand {
	return testseed.New(t)
}

func randData(rng *rand.Rand, n int) []float32 {
	d := make([]float32, n)
	for i := range d {
		d[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()*3))
	}
	return d
}

// typeName returns the safetensors name of t's dtype ("F32" when empty).
func (t Tensor) typeName() string {
	if t.DType == "" {
		return "F32"
	}
	return t.DType
}

// expected is what reading back t must give: the value rounded through t's dtype.
func expected(t Tensor) []float32 {
	out := make([]float32, len(t.Data))
	for i, v := range t.Data {
		switch t.typeName() {
		case "BF16":
			out[i] = dtype.BF16ToFloat32(dtype.Float32ToBF16(v))
		case "F16":
			out[i] = dtype.F16ToFloat32(dtype.Float32ToF16(v))
		default:
			out[i] = v
		}
	}
	return out
}

func sameBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

func TestWriteRoundTrip(t *testing.T) {
	rng := newRNG(t)
	dir := t.TempDir()
	tensors := []Tensor{
		{Name: "model.layers.0.mlp.up_proj.weight", Shape: []int{7, 5}, DType: "BF16"},
		{Name: "a.f32", Shape: []int{3, 4, 2}, DType: "F32"},
		{Name: "b.f16", Shape: []int{9}, DType: "F16"},
		{Name: "c.f64", Shape: []int{2, 3}, DType: "F64"},
		{Name: "d.default", Shape: []int{4}},
		{Name: "e.scalar", Shape: []int{}, DType: "F32"},
		{Name: "f.empty", Shape: []int{0, 3}, DType: "BF16"},
		{Name: "g.large", Shape: []int{1100, 1000}, DType: "F32"}, // spans several read chunks
		{Name: "h.unicode-ключ \"quoted\"", Shape: []int{2}, DType: "F16"},
	}
	for i := range tensors {
		tensors[i].Data = randData(rng, Info{Shape: tensors[i].Shape}.Numel())
	}
	meta := map[string]string{"format": "pt", "note": "line\nbreak \"q\""}
	path := filepath.Join(dir, "rt.safetensors")
	if err := Write(path, tensors, meta); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.Metadata(); !reflect.DeepEqual(got, meta) {
		t.Errorf("metadata %v, want %v", got, meta)
	}
	names := f.Names()
	if len(names) != len(tensors) || !sortedStrings(names) {
		t.Errorf("names %v: want %d sorted", names, len(tensors))
	}
	for _, tt := range tensors {
		t.Run(tt.Name, func(t *testing.T) {
			info, ok := f.Info(tt.Name)
			if !ok || info.DType != tt.typeName() || !reflect.DeepEqual(info.Shape, tt.Shape) {
				t.Fatalf("info %+v %v, want %s %v", info, ok, tt.typeName(), tt.Shape)
			}
			got, err := f.Float32(tt.Name)
			if err != nil {
				t.Fatal(err)
			}
			if i := sameBits(got, expected(tt)); i >= 0 {
				t.Fatalf("element %d: got %v, want %v", i, got[i], expected(tt)[i])
			}
			into := make([]float32, len(got))
			if err := f.Float32Into(tt.Name, into); err != nil || sameBits(into, got) >= 0 {
				t.Fatalf("Float32Into differs (err %v)", err)
			}
		})
	}
	if _, err := f.Float32("missing"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), path) {
		t.Errorf("missing tensor: err %v", err)
	}
	if err := f.Float32Into("a.f32", make([]float32, 3)); err == nil || !strings.Contains(err.Error(), `"a.f32"`) {
		t.Errorf("Float32Into with a short slice: err %v", err)
	}
	// Data starts 8-aligned, as the reference writer does.
	raw, _ := os.ReadFile(path)
	if n := binary.LittleEndian.Uint64(raw); (8+n)%8 != 0 {
		t.Errorf("header length %d leaves data unaligned", n)
	}
}

// TestConcurrentReads reads every tensor from several goroutines at once (run with -race).
func TestConcurrentReads(t *testing.T) {
	rng := newRNG(t)
	var ts []Tensor
	for i, dt := range []string{"F32", "BF16", "F16", "F64"} {
		ts = append(ts, Tensor{Name: dt, Shape: []int{40 + i, 3}, DType: dt, Data: randData(rng, (40+i)*3)})
	}
	path := filepath.Join(t.TempDir(), "c.safetensors")
	if err := Write(path, ts, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	errs := make(chan error, 8*len(ts))
	for g := range 8 {
		go func() {
			for i := range ts {
				tt := ts[(i+g)%len(ts)]
				got, err := f.Float32(tt.Name)
				if err == nil && sameBits(got, expected(tt)) >= 0 {
					err = errors.New(tt.Name + ": values differ")
				}
				errs <- err
			}
		}()
	}
	for range 8 * len(ts) {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func sortedStrings(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] >= s[i] {
			return false
		}
	}
	return true
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.safetensors")
	good := []Tensor{{Name: "w", Shape: []int{2}, Data: []float32{1.5, -2}}}
	if err := Write(path, good, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	cases := []struct {
		name    string
		tensors []Tensor
		want    string
	}{
		{"shape-mismatch", []Tensor{{Name: "w", Shape: []int{3}, Data: []float32{1, 2}}}, `tensor "w": shape [3] has 3 elements, data has 2`},
		{"bad-dtype", []Tensor{{Name: "w", Shape: []int{1}, DType: "I32", Data: []float32{1}}}, `cannot write dtype "I32"`},
		{"duplicate", []Tensor{{Name: "w", Shape: []int{1}, Data: []float32{1}}, {Name: "w", Shape: []int{1}, Data: []float32{2}}}, `"w" appears twice`},
		{"reserved-name", []Tensor{{Name: "__metadata__", Shape: []int{1}, Data: []float32{1}}}, `not allowed`},
		{"raw-size", []Tensor{{Name: "w", Shape: []int{3}, DType: "BF16", Raw: make([]byte, 4)}}, `needs 6 bytes, raw data has 4`},
		{"raw-unknown-dtype", []Tensor{{Name: "w", Shape: []int{1}, DType: "Q4", Raw: make([]byte, 1)}}, `cannot write dtype "Q4"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Write(path, c.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("err %v, want it to name %s and contain %q", err, path, c.want)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) {
				t.Fatal("failed write changed the existing file")
			}
		})
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temporary files left behind: %v", ents)
	}
}

// TestWriteRaw writes tensors given as raw bytes (bf16 bits, int32) beside a
// converted one and reads the same bytes and values back.
func TestWriteRaw(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raw.safetensors")
	bf := []byte{0x80, 0x3f, 0x00, 0xc0, 0x49, 0x40} // bf16 1, -2, 3.140625
	i32 := []byte{7, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}
	ts := []Tensor{{Name: "h", Shape: []int{3}, DType: "BF16", Raw: bf}, {Name: "i", Shape: []int{2}, DType: "I32", Raw: i32},
		{Name: "f", Shape: []int{1}, Data: []float32{0.25}}}
	if err := Write(path, ts, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, want := range map[string][]byte{"h": bf, "i": i32} {
		got, err := f.Bytes(name)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: bytes %v (%v), want %v", name, got, err, want)
		}
	}
	h, _ := f.Float32("h")
	if h[0] != 1 || h[1] != -2 || h[2] != 3.140625 {
		t.Errorf("bf16 values %v", h)
	}
	if i, ok := f.Info("i"); !ok || i.DType != "I32" {
		t.Errorf("int tensor info %+v", i)
	}
	if v, _ := f.Float32("f"); v[0] != 0.25 {
		t.Errorf("converted tensor %v", v)
	}
}

// rawFile builds a file from a literal header and data.
func rawFile(t *testing.T, header string, data []byte) string {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestIntegerDTypes(t *testing.T) {
	le := binary.LittleEndian
	var data []byte
	data = le.AppendUint32(le.AppendUint32(data, uint32(0xfffffffd)), 7) // I32 [-3, 7]
	data = le.AppendUint64(data, uint64(0xffffffffffffff9c))             // I64 [-100]
	data = append(data, 1, 0, 255)                                       // BOOL [1 0], U8 [255]
	data = append(data, 0x80)                                            // I8 [-128]
	data = le.AppendUint16(le.AppendUint16(data, 0xfffe), 0x3c00)        // I16 [-2], F16 [1]
	hdr := `{"i32":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},` +
		`"i64":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},` +
		`"bool":{"dtype":"BOOL","shape":[2],"data_offsets":[16,18]},` +
		`"u8":{"dtype":"U8","shape":[],"data_offsets":[18,19]},` +
		`"i8":{"dtype":"I8","shape":[1,1],"data_offsets":[19,20]},` +
		`"i16":{"dtype":"I16","shape":[1],"data_offsets":[20,22]},` +
		`"f16":{"dtype":"F16","shape":[1],"data_offsets":[22,24]}}`
	f, err := Open(rawFile(t, hdr, data))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string][]float32{"i32": {-3, 7}, "i64": {-100}, "bool": {1, 0}, "u8": {255}, "i8": {-128}, "i16": {-2}, "f16": {1}}
	for name, w := range want {
		got, err := f.Float32(name)
		if err != nil || !reflect.DeepEqual(got, w) {
			t.Errorf("%s: got %v (%v), want %v", name, got, err, w)
		}
	}
	if b, err := f.Bytes("i32"); err != nil || !bytes.Equal(b, data[:8]) {
		t.Errorf("Bytes(i32) = %v, %v", b, err)
	}
}

func TestCorruptHeaders(t *testing.T) {
	data8 := make([]byte, 8)
	cases := []struct {
		name   string
		build  func(t *testing.T) string
		tensor string // tensor the error must name ("" when none)
		want   string
	}{
		{"short-file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "s.safetensors")
			os.WriteFile(p, []byte{1, 2, 3}, 0o644)
			return p
		}, "", "shorter than the 8-byte header length"},
		{"header-too-large", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "h.safetensors")
			b := binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1)
			os.WriteFile(p, append(b, "{}"...), 0o644)
			return p
		}, "", "exceeds the limit"},
		{"truncated-header", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "t.safetensors")
			b := binary.LittleEndian.AppendUint64(nil, 100)
			os.WriteFile(p, append(b, `{"a":`...), 0o644)
			return p
		}, "", "truncated file?"},
		{"not-json", func(t *testing.T) string { return rawFile(t, `{"a": nope}`, nil) }, "", "header JSON"},
		{"json-array", func(t *testing.T) string { return rawFile(t, `[1, 2]`, nil) }, "", "not a JSON object"},
		{"unknown-dtype", func(t *testing.T) string {
			return rawFile(t, `{"w":{"dtype":"F128","shape":[2],"data_offsets":[0,8]}}`, data8)
		}, "w", `unknown dtype "F128"`},
		{"missing-offsets", func(t *testing.T) string {
			return rawFile(t, `{"w":{"dtype":"F32","shape":[2]}}`, data8)
		}, "w", "missing data_offsets"},
		{"missing-shape", func(t *testing.T) string {
			return rawFile(t, `{"w":{"dtype":"F32","data_offsets":[0,8]}}`, data8)
		}, "w", "missing shape"},
		{"shape-size-mismatch", func(t *testing.T) string {
			return rawFile(t, `{"lm_head.weight":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}}`, data8)
		}, "lm_head.weight", "BF16 shape [3] needs 6 bytes, data_offsets span 8"},
		{"negative-dim", func(t *testing.T) string {
			return rawFile(t, `{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, data8)
		}, "w", "negative dimension"},
		{"overflowing-shape", func(t *testing.T) string {
			return rawFile(t, `{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, data8)
		}, "w", "overflows"},
		{"offsets-past-end", func(t *testing.T) string {
			return rawFile(t, `{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, data8)
		}, "w", "run past the end of the data"},
		{"offsets-reversed", func(t *testing.T) string {
			return rawFile(t, `{"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, data8)
		}, "w", "not an increasing pair"},
		{"overlap", func(t *testing.T) string {
			return rawFile(t, `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}}`, data8)
		}, "b", `overlap tensor "a"`},
		{"bad-metadata", func(t *testing.T) string {
			return rawFile(t, `{"__metadata__":{"n":3}}`, nil)
		}, "", "__metadata__ must map strings to strings"},
		{"bad-entry", func(t *testing.T) string {
			return rawFile(t, `{"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}}`, data8)
		}, "w", "entry"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.build(t)
			f, err := Open(path)
			if err == nil {
				f.Close()
				t.Fatal("Open succeeded")
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, path+": ") || !strings.Contains(msg, c.want) {
				t.Fatalf("error %q: want prefix %q and %q", msg, path, c.want)
			}
			if c.tensor != "" && !strings.Contains(msg, `tensor "`+c.tensor+`"`) {
				t.Fatalf("error %q does not name tensor %q", msg, c.tensor)
			}
		})
	}
}

// TestTruncatedEverywhere cuts a valid file at every length: Open must fail with a
// FormatError each time, and never panic.
func TestTruncatedEverywhere(t *testing.T) {
	rng := newRNG(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "full.safetensors")
	err := Write(path, []Tensor{
		{Name: "a", Shape: []int{3, 3}, DType: "BF16", Data: randData(rng, 9)},
		{Name: "b", Shape: []int{5}, DType: "F32", Data: randData(rng, 5)},
	}, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	full, _ := os.ReadFile(path)
	cut := filepath.Join(dir, "cut.safetensors")
	for n := 0; n < len(full); n++ {
		os.WriteFile(cut, full[:n], 0o644)
		f, err := Open(cut)
		if err == nil {
			f.Close()
			t.Fatalf("file cut to %d of %d bytes opened without error", n, len(full))
		}
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Fatalf("cut to %d: %v is not a FormatError", n, err)
		}
	}
}

// FuzzOpen checks that arbitrary bytes never panic Open or a successful read.
func FuzzOpen(f *testing.F) {
	var b bytes.Buffer
	Encode(&b, []Tensor{{Name: "x", Shape: []int{2}, DType: "F16", Data: []float32{1, 2}}}, map[string]string{"a": "b"})
	f.Add(b.Bytes())
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f.safetensors")
		os.WriteFile(p, data, 0o644)
		sf, err := Open(p)
		if err != nil {
			return
		}
		defer sf.Close()
		for _, n := range sf.Names() {
			if _, err := sf.Float32(n); err != nil {
				t.Fatalf("tensor %q of a validated file: %v", n, err)
			}
		}
	})
}
