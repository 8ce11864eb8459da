package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
)

// BF16ToFloat32 widens a bfloat16 (1 sign, 8 exponent, 7 mantissa bits) exactly: the
// bfloat16 bits are the high half of the float32.
func BF16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// Float32ToBF16 rounds f to the nearest bfloat16, ties to even. Values beyond the
// largest finite bfloat16 round to infinity; NaN stays NaN (sign kept, quiet bit set).
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToFloat32 widens an IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits)
// exactly, subnormals, infinities and NaN included.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise into float32's wider exponent range
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// Float32ToF16 rounds f to the nearest IEEE 754 binary16, ties to even, producing
// subnormals below 2^-14, infinity at and above 65520, and a quiet NaN for NaN.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // binary16 biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Result is subnormal (or rounds up to the smallest normal): its value in
		// units of 2^-24 is man24 * 2^(exp-150+24) = man24 >> (14-e).
		shift := uint(14 - e)
		if shift > 24 || exp == 0 {
			return sign // below half the smallest subnormal (float32 subnormals included)
		}
		m24 := man | 0x800000
		m := m24 >> shift
		rem := m24 & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && m&1 == 1 {
			m++
		}
		return sign | uint16(m)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // a carry into the exponent is correct, up to infinity
	}
	return sign | uint16(h)
}

// F8E4M3ToFloat32 widens an OCP FP8 E4M3 ("E4M3FN": bias 7, no infinities, NaN when
// all exponent and mantissa bits are set).
func F8E4M3ToFloat32(b uint8) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	exp := int(b>>3) & 0xf
	man := float64(b & 0x7)
	if exp == 0xf && man == 7 {
		return float32(math.NaN())
	}
	if exp == 0 {
		return sign * float32(math.Ldexp(man/8, -6))
	}
	return sign * float32(math.Ldexp(1+man/8, exp-7))
}

// F8E4M3Max is the largest finite OCP FP8 E4M3 value, 1.75 * 2^8.
const F8E4M3Max = 448

// Float32ToF8E4M3 rounds f to the nearest OCP FP8 E4M3 ("E4M3FN") value,
// ties to the even mantissa, saturating: magnitudes at or beyond 448,
// infinities included, become ±448 (0x7e / 0xfe); values below half the
// smallest subnormal (2^-10) become a zero of f's sign; every NaN becomes
// 0x7f. So decoding then encoding returns every code but 0xff (the negative
// NaN, which decodes to a NaN that encodes as 0x7f).
func Float32ToF8E4M3(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return 0x7f
	case a >= 0x43e00000: // 448 and beyond
		return sign | 0x7e
	}
	exp := int(a>>23) - 127 + 7 // E4M3 biased exponent
	if exp >= 1 {
		man := a & 0x7fffff
		code := uint32(exp)<<3 | man>>20
		rem := man & 0xfffff
		if rem > 0x80000 || rem == 0x80000 && code&1 == 1 {
			code++ // a carry into the exponent is correct; below 448 it stays finite
		}
		return sign | uint8(code)
	}
	// Subnormal result (or the smallest normal, code 8, reached by rounding
	// up): its value in units of 2^-9 is m24 * 2^(E-150+9) = m24 >> (141-E)
	// for a normal float32 of biased exponent E.
	e := int(a >> 23)
	shift := uint(141 - e)
	if e == 0 || shift > 24 {
		return sign // below 2^-10 (float32 subnormals included): rounds to zero
	}
	m24 := a&0x7fffff | 0x800000
	q := m24 >> shift
	rem := m24 & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	return sign | uint8(q)
}

// F8E5M2ToFloat32 widens an OCP FP8 E5M2 (bias 15, IEEE-style infinities and NaN).
func F8E5M2ToFloat32(b uint8) float32 {
	return F16ToFloat32(uint16(b) << 8)
}

// F8E8M0ToFloat32 widens an OCP E8M0 scale (8 exponent bits, bias 127, no sign or
// mantissa; 0xff is NaN): 2^(b-127).
func F8E8M0ToFloat32(b uint8) float32 {
	if b == 0xff {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(b)-127))
}

// DecodeFloat32 converts src, the little-endian bytes of len(dst) elements of
// t, into dst. Every type converts (integers and booleans by value). It panics
// when src is shorter than len(dst) elements or t is invalid.
func DecodeFloat32(t DType, dst []float32, src []byte) {
	if len(src) < len(dst)*t.Size() {
		panic(fmt.Sprintf("dtype: DecodeFloat32: %d bytes for %d %v elements", len(src), len(dst), t))
	}
	le := binary.LittleEndian
	switch t {
	case F32:
		decodeEach(dst, src, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })
	case BF16:
		decodeEach(dst, src, 2, func(b []byte) float32 { return BF16ToFloat32(le.Uint16(b)) })
	case F16:
		decodeEach(dst, src, 2, func(b []byte) float32 { return F16ToFloat32(le.Uint16(b)) })
	case F64:
		decodeEach(dst, src, 8, func(b []byte) float32 { return float32(math.Float64frombits(le.Uint64(b))) })
	case F8E4M3:
		decodeEach(dst, src, 1, func(b []byte) float32 { return F8E4M3ToFloat32(b[0]) })
	case F8E5M2:
		decodeEach(dst, src, 1, func(b []byte) float32 { return F8E5M2ToFloat32(b[0]) })
	case F8E8M0:
		decodeEach(dst, src, 1, func(b []byte) float32 { return F8E8M0ToFloat32(b[0]) })
	case Bool, U8:
		decodeEach(dst, src, 1, func(b []byte) float32 { return float32(b[0]) })
	case I8:
		decodeEach(dst, src, 1, func(b []byte) float32 { return float32(int8(b[0])) })
	case U16:
		decodeEach(dst, src, 2, func(b []byte) float32 { return float32(le.Uint16(b)) })
	case I16:
		decodeEach(dst, src, 2, func(b []byte) float32 { return float32(int16(le.Uint16(b))) })
	case U32:
		decodeEach(dst, src, 4, func(b []byte) float32 { return float32(le.Uint32(b)) })
	case I32:
		decodeEach(dst, src, 4, func(b []byte) float32 { return float32(int32(le.Uint32(b))) })
	case U64:
		decodeEach(dst, src, 8, func(b []byte) float32 { return float32(le.Uint64(b)) })
	case I64:
		decodeEach(dst, src, 8, func(b []byte) float32 { return float32(int64(le.Uint64(b))) })
	default:
		panic(fmt.Sprintf("dtype: DecodeFloat32: unhandled %v", t))
	}
}

// decodeEach sets dst[i] to get of the i-th size-byte element of src.
func decodeEach(dst []float32, src []byte, size int, get func(b []byte) float32) {
	inParallel(len(dst), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dst[i] = get(src[size*i:])
		}
	})
}

// parallelGrain is the element count below which a conversion stays on the
// calling goroutine, and the chunk the goroutines take (a model's weights
// convert on every core; a step's small inputs do not start goroutines).
const parallelGrain = 1 << 20

// inParallel runs f over [0, n) in chunks of parallelGrain on every core.
// Each element is converted alone, so the result does not depend on the
// split.
func inParallel(n int, f func(lo, hi int)) {
	if n <= parallelGrain {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), (n+parallelGrain-1)/parallelGrain) {
		wg.Go(func() {
			for lo := range next {
				f(lo, min(n, lo+parallelGrain))
			}
		})
	}
	for lo := 0; lo < n; lo += parallelGrain {
		next <- lo
	}
	close(next)
	wg.Wait()
}

// CanEncode reports whether EncodeFloat32 writes t: F32, BF16, F16 and F64.
func CanEncode(t DType) bool { return t == F32 || t == BF16 || t == F16 || t == F64 }

// EncodeFloat32 converts src into t's little-endian bytes in dst, rounding to
// nearest even. It panics when dst is shorter than len(src) elements or
// CanEncode(t) is false.
func EncodeFloat32(t DType, dst []byte, src []float32) {
	if !CanEncode(t) {
		panic(fmt.Sprintf("dtype: EncodeFloat32: cannot encode %v", t))
	}
	if len(dst) < len(src)*t.Size() {
		panic(fmt.Sprintf("dtype: EncodeFloat32: %d bytes for %d %v elements", len(dst), len(src), t))
	}
	le := binary.LittleEndian
	inParallel(len(src), func(lo, hi int) {
		switch t {
		case F32:
			for i, v := range src[lo:hi] {
				le.PutUint32(dst[4*(lo+i):], math.Float32bits(v))
			}
		case BF16:
			for i, v := range src[lo:hi] {
				le.PutUint16(dst[2*(lo+i):], Float32ToBF16(v))
			}
		case F16:
			for i, v := range src[lo:hi] {
				le.PutUint16(dst[2*(lo+i):], Float32ToF16(v))
			}
		case F64:
			for i, v := range src[lo:hi] {
				le.PutUint64(dst[8*(lo+i):], math.Float64bits(float64(v)))
			}
		}
	})
}

// EncodeHalves writes src as t (BF16 or F16) bit patterns into dst, rounding
// to nearest even. It panics when the lengths differ or t is not a 16-bit float.
func EncodeHalves(t DType, dst []uint16, src []float32) {
	enc, _ := halfCodec(t, "EncodeHalves")
	convertInto("EncodeHalves", dst, src, enc)
}

// DecodeHalves writes the values of src, t (BF16 or F16) bit patterns, into
// dst. It panics when the lengths differ or t is not a 16-bit float.
func DecodeHalves(t DType, dst []float32, src []uint16) {
	_, dec := halfCodec(t, "DecodeHalves")
	convertInto("DecodeHalves", dst, src, dec)
}

// convertInto writes f of each element of src into dst; it panics, naming
// caller, when their lengths differ.
func convertInto[S, D any](caller string, dst []D, src []S, f func(S) D) {
	if len(dst) != len(src) {
		panic(fmt.Sprintf("dtype: %s: %d elements into %d", caller, len(src), len(dst)))
	}
	for i, v := range src {
		dst[i] = f(v)
	}
}

// halfCodec returns the conversions of t, BF16 or F16; for another t it
// panics naming caller.
func halfCodec(t DType, caller string) (enc func(float32) uint16, dec func(uint16) float32) {
	switch t {
	case BF16:
		return Float32ToBF16, BF16ToFloat32
	case F16:
		return Float32ToF16, F16ToFloat32
	}
	panic(fmt.Sprintf("dtype: %s: %v is not bf16 or f16", caller, t))
}
