package dtype

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"dflash/internal/testseed"
)

// all lists every valid type, built from the constants (not from the table).
var all = []DType{F64, F32, BF16, F16, F8E4M3, F8E5M2, F8E8M0, I64, I32, I16, I8, U64, U32, U16, U8, Bool}

// bitsOf reads the element width from a safetensors name ("BF16" 16,
// "F8_E4M3" 8, "BOOL" 8), independently of the size table.
func bitsOf(t *testing.T, name string) int {
	if name == "BOOL" {
		return 8
	}
	digits := strings.TrimLeft(name, "BFIU")
	if i := strings.IndexByte(digits, '_'); i >= 0 {
		digits = digits[:i]
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		t.Fatalf("name %q: %v", name, err)
	}
	return n
}

func TestTable(t *testing.T) {
	if Invalid.Valid() || DType(len(all)+1).Valid() {
		t.Fatal("Invalid or one past the last type reports Valid")
	}
	seen := map[string]DType{}
	for _, dt := range all {
		t.Run(dt.String(), func(t *testing.T) {
			st := dt.Safetensors()
			if got := dt.Size() * 8; got != bitsOf(t, st) {
				t.Errorf("Size %d bytes, name %q says %d bits", dt.Size(), st, bitsOf(t, st))
			}
			if want := st[0] == 'F' || st == "BF16"; dt.IsFloat() != want {
				t.Errorf("IsFloat = %v, want %v", dt.IsFloat(), want)
			}
			for _, name := range []string{dt.String(), st, strings.ToUpper(dt.String()), " " + st + " "} {
				if got, err := Parse(name); err != nil || got != dt {
					t.Errorf("Parse(%q) = %v, %v", name, got, err)
				}
			}
			if got, ok := FromSafetensors(st); !ok || got != dt {
				t.Errorf("FromSafetensors(%q) = %v, %v", st, got, ok)
			}
			for _, name := range []string{dt.String(), st} {
				if prev, dup := seen[name]; dup && prev != dt {
					t.Errorf("name %q used by %v and %v", name, prev, dt)
				}
				seen[name] = dt
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want DType
	}{{"fp16", F16}, {"float16", F16}, {"FP32", F32}, {"float32", F32}, {"bfloat16", BF16},
		{"float64", F64}, {"int64", I64}, {"uint8", U8}, {"f8_e4m3", F8E4M3}, {"bool", Bool}} {
		if got, err := Parse(c.in); err != nil || got != c.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "f128", "bf 16", "q4"} {
		if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("Parse(%q) error %v, want one naming the input", bad, err)
		}
	}
	if _, ok := FromSafetensors("bf16"); ok {
		t.Error(`FromSafetensors("bf16") accepted a lower-case name; the format is case-sensitive`)
	}
	if got, err := ParseOneOf("fp16", BF16, F16); err != nil || got != F16 {
		t.Errorf("ParseOneOf(fp16) = %v, %v", got, err)
	}
	_, err := ParseOneOf("f32", BF16, F16)
	if err == nil || err.Error() != `dtype "f32": want bf16 or f16` {
		t.Errorf("ParseOneOf(f32, bf16, f16) error %v", err)
	}
	var v struct{ T DType }
	if err := json.Unmarshal([]byte(`{"T":"BF16"}`), &v); err != nil || v.T != BF16 {
		t.Fatalf("unmarshal: %v %v", v.T, err)
	}
	if b, err := json.Marshal(v); err != nil || string(b) != `{"T":"bf16"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	if _, err := json.Marshal(struct{ T DType }{}); err == nil {
		t.Fatal("marshalling Invalid succeeded")
	}
}

// TestEncodeDecode checks the byte conversions against values built with
// encoding/binary and the per-element conversions, for every type.
func TestEncodeDecode(t *testing.T) {
	rng := testseed.New(t)
	const n = 257
	le := binary.LittleEndian
	for _, dt := range all {
		t.Run(dt.String(), func(t *testing.T) {
			raw := make([]byte, n*dt.Size())
			for i := range raw {
				raw[i] = byte(rng.Uint32())
			}
			got := make([]float32, n)
			DecodeFloat32(dt, got, raw)
			for i := range n {
				var want float64
				switch b := raw[i*dt.Size():]; dt {
				case F64:
					want = float64(float32(math.Float64frombits(le.Uint64(b))))
				case F32:
					want = float64(math.Float32frombits(le.Uint32(b)))
				case BF16:
					want = float64(BF16ToFloat32(le.Uint16(b)))
				case F16:
					want = float64(F16ToFloat32(le.Uint16(b)))
				case F8E4M3:
					want = float64(F8E4M3ToFloat32(b[0]))
				case F8E5M2:
					want = float64(F8E5M2ToFloat32(b[0]))
				case F8E8M0:
					want = float64(F8E8M0ToFloat32(b[0]))
				case I64:
					want = float64(float32(int64(le.Uint64(b))))
				case I32:
					want = float64(float32(int32(le.Uint32(b))))
				case I16:
					want = float64(int16(le.Uint16(b)))
				case I8:
					want = float64(int8(b[0]))
				case U64:
					want = float64(float32(le.Uint64(b)))
				case U32:
					want = float64(float32(le.Uint32(b)))
				case U16:
					want = float64(le.Uint16(b))
				case U8, Bool:
					want = float64(b[0])
				}
				if g := float64(got[i]); !(g == want || math.IsNaN(g) && math.IsNaN(want)) {
					t.Fatalf("element %d: got %g, want %g", i, g, want)
				}
			}
			if !CanEncode(dt) {
				return
			}
			src := make([]float32, n)
			for i := range src {
				src[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(20)-10))
			}
			enc := make([]byte, n*dt.Size())
			EncodeFloat32(dt, enc, src)
			for i, v := range src {
				b := enc[i*dt.Size():]
				var ok bool
				switch dt {
				case F64:
					ok = math.Float64frombits(le.Uint64(b)) == float64(v)
				case F32:
					ok = math.Float32frombits(le.Uint32(b)) == v
				case BF16:
					ok = le.Uint16(b) == Float32ToBF16(v)
				case F16:
					ok = le.Uint16(b) == Float32ToF16(v)
				}
				if !ok {
					t.Fatalf("element %d (%g): encoded % x", i, v, b[:dt.Size()])
				}
			}
		})
	}
}

func TestPanics(t *testing.T) {
	for name, fn := range map[string]func(){
		"size-invalid":      func() { Invalid.Size() },
		"safetensors-bad":   func() { DType(200).Safetensors() },
		"decode-short":      func() { DecodeFloat32(F32, make([]float32, 2), make([]byte, 7)) },
		"encode-short":      func() { EncodeFloat32(BF16, make([]byte, 3), make([]float32, 2)) },
		"encode-integer":    func() { EncodeFloat32(I32, make([]byte, 4), make([]float32, 1)) },
		"halves-length":     func() { EncodeHalves(BF16, make([]uint16, 2), make([]float32, 3)) },
		"halves-not-16-bit": func() { DecodeHalves(F32, make([]float32, 1), make([]uint16, 1)) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			fn()
		})
	}
}
