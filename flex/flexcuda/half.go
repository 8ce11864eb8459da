package flexcuda

import "dflash/safetensors"

// EncodeHalf writes src as bf16 (fp16 when fp16 is set) bit patterns into
// dst, rounding to nearest even (the conversions of package safetensors).
// It panics when the lengths differ.
func EncodeHalf(dst []uint16, src []float32, fp16 bool) {
	if len(dst) != len(src) {
		panic("flexcuda: EncodeHalf: length mismatch")
	}
	enc := safetensors.Float32ToBF16
	if fp16 {
		enc = safetensors.Float32ToF16
	}
	for i, v := range src {
		dst[i] = enc(v)
	}
}

// DecodeHalf writes the bf16 (fp16 when fp16 is set) values of src into dst.
func DecodeHalf(dst []float32, src []uint16, fp16 bool) {
	if len(dst) != len(src) {
		panic("flexcuda: DecodeHalf: length mismatch")
	}
	dec := safetensors.BF16ToFloat32
	if fp16 {
		dec = safetensors.F16ToFloat32
	}
	for i, h := range src {
		dst[i] = dec(h)
	}
}
