// Package dtype names the element types of dflash: one enum, used by the
// safetensors format, the CUDA library mappings (cuBLASLt, NCCL), device
// buffers and the attention kernels, with each type's size, its names and the
// conversions between the floating formats and float32.
//
// Every type has two names: the short lower-case name that flags, logs and
// reports print ("bf16", "f32", "i64") and the safetensors name of the file
// format ("BF16", "F32", "I64"). Parse accepts either, in any case, plus the
// common spellings "fp16", "float32", "bfloat16" and the like.
package dtype

import (
	"fmt"
	"strings"
)

// DType is an element type. The zero DType is Invalid, so that a forgotten
// field is caught by the first Size call instead of becoming a default type.
type DType uint8

// The element types: IEEE and brain floats, the OCP FP8 formats that
// safetensors files carry, signed and unsigned integers, and booleans (one
// byte each).
const (
	Invalid DType = iota
	F64
	F32
	BF16
	F16
	F8E4M3 // OCP FP8 E4M3FN: bias 7, no infinities
	F8E5M2 // OCP FP8 E5M2: bias 15, IEEE-style infinities and NaN
	F8E8M0 // OCP E8M0 scale: 2^(b-127)
	I64
	I32
	I16
	I8
	U64
	U32
	U16
	U8
	Bool
	numDTypes
)

// info is one row of the type table.
type info struct {
	short, safetensors string
	size               int
	float              bool
}

// table is the one place that gives each type its names and size.
var table = [numDTypes]info{
	F64:    {"f64", "F64", 8, true},
	F32:    {"f32", "F32", 4, true},
	BF16:   {"bf16", "BF16", 2, true},
	F16:    {"f16", "F16", 2, true},
	F8E4M3: {"f8e4m3", "F8_E4M3", 1, true},
	F8E5M2: {"f8e5m2", "F8_E5M2", 1, true},
	F8E8M0: {"f8e8m0", "F8_E8M0", 1, true},
	I64:    {"i64", "I64", 8, false},
	I32:    {"i32", "I32", 4, false},
	I16:    {"i16", "I16", 2, false},
	I8:     {"i8", "I8", 1, false},
	U64:    {"u64", "U64", 8, false},
	U32:    {"u32", "U32", 4, false},
	U16:    {"u16", "U16", 2, false},
	U8:     {"u8", "U8", 1, false},
	Bool:   {"bool", "BOOL", 1, false},
}

// aliases are the other spellings Parse accepts (lower case).
var aliases = map[string]DType{
	"fp64": F64, "float64": F64, "double": F64,
	"fp32": F32, "float32": F32, "float": F32,
	"bfloat16": BF16,
	"fp16":     F16, "float16": F16, "half": F16,
	"int64": I64, "int32": I32, "int16": I16, "int8": I8,
	"uint64": U64, "uint32": U32, "uint16": U16, "uint8": U8,
}

// Valid reports whether t is one of the defined types.
func (t DType) Valid() bool { return t > Invalid && t < numDTypes }

// Size returns the bytes per element. It panics for an invalid type (a
// programming error: every DType that reaches Size came from a constant,
// Parse or FromSafetensors).
func (t DType) Size() int {
	if !t.Valid() {
		panic(fmt.Sprintf("dtype: Size of invalid %v", t))
	}
	return table[t].size
}

// IsFloat reports whether t is a floating-point type.
func (t DType) IsFloat() bool { return t.Valid() && table[t].float }

// String returns the short name ("bf16", "f32"), or "DType(n)" for an invalid type.
func (t DType) String() string {
	if !t.Valid() {
		return fmt.Sprintf("DType(%d)", uint8(t))
	}
	return table[t].short
}

// Safetensors returns the name the safetensors format uses ("BF16", "F8_E4M3").
// It panics for an invalid type.
func (t DType) Safetensors() string {
	if !t.Valid() {
		panic(fmt.Sprintf("dtype: Safetensors name of invalid %v", t))
	}
	return table[t].safetensors
}

// FromSafetensors returns the type a safetensors header names (exactly, as the
// format is case-sensitive), and false for a name the format does not define.
func FromSafetensors(name string) (DType, bool) {
	for t := F64; t < numDTypes; t++ {
		if table[t].safetensors == name {
			return t, true
		}
	}
	return Invalid, false
}

// Parse reads a type name: a short name, a safetensors name or an alias such as
// "fp16" or "float32", in any case. The error lists the short names.
func Parse(s string) (DType, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	for t := F64; t < numDTypes; t++ {
		if l == table[t].short || l == strings.ToLower(table[t].safetensors) {
			return t, nil
		}
	}
	if t, ok := aliases[l]; ok {
		return t, nil
	}
	return Invalid, fmt.Errorf("unknown dtype %q (want one of %s)", s, strings.Join(names(), ", "))
}

// ParseOneOf reads a type name as Parse does and also requires it to be one of
// allowed; the error names the allowed types.
func ParseOneOf(s string, allowed ...DType) (DType, error) {
	t, err := Parse(s)
	if err == nil {
		for _, a := range allowed {
			if t == a {
				return t, nil
			}
		}
	}
	want := make([]string, len(allowed))
	for i, a := range allowed {
		want[i] = a.String()
	}
	return Invalid, fmt.Errorf("dtype %q: want %s", s, strings.Join(want, " or "))
}

// names returns the short names of all types in table order.
func names() []string {
	var out []string
	for t := F64; t < numDTypes; t++ {
		out = append(out, table[t].short)
	}
	return out
}

// Set parses s into t (flag.Value).
func (t *DType) Set(s string) error {
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// MarshalText writes the short name, so that JSON reports print "bf16".
func (t DType) MarshalText() ([]byte, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("dtype: cannot marshal invalid %v", t)
	}
	return []byte(t.String()), nil
}

// UnmarshalText reads any name Parse accepts.
func (t *DType) UnmarshalText(b []byte) error { return t.Set(string(b)) }
