package flexcuda

import "dflash/dtype"

// halfType is the storage type fp16 selects.
func halfType(fp16 bool) dtype.DType {
	if fp16 {
		return dtype.F16
	}
	return dtype.BF16
}

// EncodeHalf writes src as bf16 (fp16 when fp16 is set) bit patterns into dst.
func EncodeHalf(dst []uint16, src []float32, fp16 bool) { dtype.EncodeHalves(halfType(fp16), dst, src) }

// DecodeHalf writes the bf16 (fp16 when fp16 is set) values of src into dst.
func DecodeHalf(dst []float32, src []uint16, fp16 bool) { dtype.DecodeHalves(halfType(fp16), dst, src) }
