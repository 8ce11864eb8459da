package recipe

import (
	"dflash/gpu"
	"dflash/internal/cpufeat"
)

// MFUPeak returns the peak FLOP rate in TFLOP/s that the MFU of a training
// step divides by, and its source (logged as mfu_peak_source): override
// when positive (--peak-tflops); else the dense bf16 tensor-core peak of
// the GPU dev (gpu.Info.DenseBF16Peak); else, dev nil, the float32 peak of
// threads cores of this CPU (cpufeat.PeakTFLOPS; threads <= 0: all). A peak
// that cannot be derived is 0 (no mfu is recorded) with the reason as its
// source.
func MFUPeak(override float64, dev *gpu.Device, threads int) (tflops float64, source string) {
	switch {
	case override > 0:
		return override, "--peak-tflops"
	case dev != nil:
		tflops, source, err := dev.Info().DenseBF16Peak()
		if err != nil {
			return 0, err.Error()
		}
		return tflops, source
	}
	return cpufeat.PeakTFLOPS(threads)
}
