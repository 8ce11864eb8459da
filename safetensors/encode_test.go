package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"sort"
	"testing"

	"dflash/dtype"
)

// TestEncodeF32InPlace: F32 tensors written from their memory (the
// little-endian host's path) give the same bytes as the element-by-element
// encoding, and both data sections equal a reference built here from
// math.Float32bits, tensor by tensor in name order; BF16 and raw tensors
// beside them keep their own encodings.
func TestEncodeF32InPlace(t *testing.T) {
	rng := newRNG(t)
	ts := []Tensor{
		{Name: "w.big", Shape: []int{encodeChunk/512 + 3, 512}, Data: randData(rng, (encodeChunk/512+3)*512)}, // more than one chunk
		{Name: "a.small", Shape: []int{3, 5}, DType: "F32", Data: randData(rng, 15)},
		{Name: "b.half", Shape: []int{7}, DType: "BF16", Data: randData(rng, 7)},
		{Name: "c.empty", Shape: []int{0, 4}, DType: "F32", Data: []float32{}},
		{Name: "d.scalar", Shape: []int{}, DType: "F32", Data: randData(rng, 1)},
		{Name: "e.raw", Shape: []int{2}, DType: "I32", Raw: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{Name: "f.tail", Shape: []int{encodeChunk + 1}, Data: randData(rng, encodeChunk+1)},
	}
	sorted := append([]Tensor(nil), ts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var want []byte
	for _, x := range sorted {
		switch {
		case x.Raw != nil:
			want = append(want, x.Raw...)
		case x.DType == "BF16":
			for _, v := range x.Data {
				want = binary.LittleEndian.AppendUint16(want, dtype.Float32ToBF16(v))
			}
		default:
			for _, v := range x.Data {
				want = binary.LittleEndian.AppendUint32(want, math.Float32bits(v))
			}
		}
	}
	encode := func(inPlace bool) []byte {
		t.Helper()
		old := f32InPlace
		f32InPlace = inPlace
		defer func() { f32InPlace = old }()
		var b bytes.Buffer
		if err := Encode(&b, ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	converted := encode(false)
	checkData := func(name string, file []byte) {
		t.Helper()
		data := file[8+binary.LittleEndian.Uint64(file):]
		if !bytes.Equal(data, want) {
			t.Errorf("%s: data section of %d bytes differs from the reference's %d (first difference at %d)", name, len(data), len(want), firstDiff(data, want))
		}
	}
	checkData("element by element", converted)
	if !dtype.HostLittleEndian {
		t.Skip("big-endian host: F32 is converted element by element")
	}
	inPlace := encode(true)
	checkData("in place", inPlace)
	if !bytes.Equal(inPlace, converted) {
		t.Errorf("in place: %d bytes differ from the element-by-element encoding's %d (first difference at %d)", len(inPlace), len(converted), firstDiff(inPlace, converted))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
