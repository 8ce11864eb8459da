package flexcuda

import "math"

// EncodeHalf writes src as bf16 (fp16 when fp16 is set) bit patterns into
// dst, rounding to nearest even. It panics when the lengths differ.
func EncodeHalf(dst []uint16, src []float32, fp16 bool) {
	if len(dst) != len(src) {
		panic("flexcuda: EncodeHalf: length mismatch")
	}
	for i, v := range src {
		if fp16 {
			dst[i] = f32ToF16(v)
		} else {
			dst[i] = f32ToBF16(v)
		}
	}
}

// DecodeHalf writes the bf16 (fp16 when fp16 is set) values of src into dst.
func DecodeHalf(dst []float32, src []uint16, fp16 bool) {
	if len(dst) != len(src) {
		panic("flexcuda: DecodeHalf: length mismatch")
	}
	for i, h := range src {
		if fp16 {
			dst[i] = f16ToF32(h)
		} else {
			dst[i] = math.Float32frombits(uint32(h) << 16)
		}
	}
}

func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40 // keep NaN a NaN
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127
	mant := b & 0x7fffff
	switch {
	case f != f:
		return 0x7e00
	case exp == 128: // inf
		return sign | 0x7c00
	case exp > 15:
		return sign | 0x7c00
	case exp >= -14:
		// normal: 10 mantissa bits, round to nearest even
		m := mant >> 13
		rest := mant & 0x1fff
		h := uint32(exp+15)<<10 | m
		if rest > 0x1000 || (rest == 0x1000 && m&1 == 1) {
			h++ // may carry into the exponent, which is right
		}
		return sign | uint16(h)
	case exp >= -25:
		// subnormal: value = mant' * 2^-24
		full := mant | 0x800000 // 24 bits, value full * 2^(exp-23)
		shift := uint(-exp - 1) // to units of 2^-24: full >> (-(exp-23) - 24)
		m := full >> shift
		rest := full & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && m&1 == 1) {
			m++
		}
		return sign | uint16(m)
	}
	return sign
}

func f16ToF32(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h >> 10 & 0x1f)
	mant := float32(h & 0x3ff)
	switch exp {
	case 0:
		return sign * mant * float32(math.Ldexp(1, -24))
	case 31:
		if mant == 0 {
			return sign * float32(math.Inf(1))
		}
		return float32(math.NaN())
	}
	return sign * (1 + mant/1024) * float32(math.Ldexp(1, exp-15))
}
