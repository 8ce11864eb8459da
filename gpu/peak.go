package gpu

import (
	"fmt"
	"strings"
)

// denseBF16PerSM is the dense bf16 tensor-core rate of one SM of each
// architecture, in FLOP per clock (a multiply-add is 2), with fp32
// accumulation and without structured sparsity, from NVIDIA's
// architecture whitepapers: each datasheet's dense bf16 TFLOP/s divided by
// its SM count and its boost clock.
var denseBF16PerSM = map[string]struct {
	flops int
	from  string
}{
	"sm_80":  {2048, "A100: 312 TFLOP/s = 108 SMs x 1410 MHz x 2048"},
	"sm_86":  {1024, "A6000/A10: half of sm_80 per SM (GeForce parts halve it again with fp32 accumulation)"},
	"sm_89":  {1024, "L40S: 362 TFLOP/s, 142 SMs at about 2.5 GHz x 1024"},
	"sm_90":  {4096, "H100 SXM: 989 TFLOP/s = 132 SMs x 1830 MHz x 4096"},
	"sm_100": {8192, "B200: 2250 TFLOP/s, 148 SMs at about 1.86 GHz x 8192"},
	"sm_120": {1024, "RTX Blackwell: as sm_89 per SM (GeForce parts halve it with fp32 accumulation)"},
}

// DenseBF16Peak returns the GPU's dense bf16 tensor-core peak in TFLOP/s,
// the rate the MFU of a training step divides by:
//
//	peak = FLOP/clock/SM of the architecture × SMs × the SMs' highest clock
//
// and the source of the number, for the log. The highest clock is the one
// the driver reports (CU_DEVICE_ATTRIBUTE_CLOCK_RATE), which can exceed
// the clock of a datasheet's figure (an H200 reports 1980 MHz: 1070
// TFLOP/s, where the datasheet's 989 assumes 1830 MHz). An architecture
// missing from the table is an error that says to give the peak.
func (i Info) DenseBF16Peak() (tflops float64, source string, err error) {
	a, ok := denseBF16PerSM[i.Arch()]
	if !ok {
		return 0, "", fmt.Errorf("GPU %d (%s, %s): no dense bf16 rate known for the architecture: give the peak (--peak-tflops)", i.Ordinal, i.Name, i.Arch())
	}
	if i.SMs <= 0 || i.ClockKHz <= 0 {
		return 0, "", fmt.Errorf("GPU %d (%s): %d SMs at %d kHz: cannot derive the peak: give it (--peak-tflops)", i.Ordinal, i.Name, i.SMs, i.ClockKHz)
	}
	tflops = float64(a.flops) * float64(i.SMs) * float64(i.ClockKHz) * 1e3 / 1e12
	return tflops, fmt.Sprintf("%s dense bf16: %d SMs x %d MHz x %d FLOP/clock/SM (%s)", i.Arch(), i.SMs, i.ClockKHz/1000, a.flops, a.from), nil
}

// hbmByName is the peak memory bandwidth of GPUs, in bytes/s, from
// NVIDIA's datasheets, by a part of the name the driver reports (the first
// that the name contains: a variant before its family).
var hbmByName = []struct {
	name      string
	bytesPerS float64
	from      string
}{
	{"H200", 4.8e12, "H200 SXM and NVL datasheet: 4.8 TB/s HBM3e"},
	{"H100 PCIe", 2.0e12, "H100 PCIe datasheet: 2.0 TB/s HBM2e"},
	{"H100 NVL", 3.9e12, "H100 NVL datasheet: 3.9 TB/s HBM3"},
	{"H100", 3.35e12, "H100 SXM datasheet: 3.35 TB/s HBM3"},
	{"A100-SXM4-80GB", 2.039e12, "A100 80GB SXM datasheet: 2.039 TB/s HBM2e"},
	{"A100 80GB PCIe", 1.935e12, "A100 80GB PCIe datasheet: 1.935 TB/s HBM2e"},
	{"A100", 1.555e12, "A100 40GB datasheet: 1.555 TB/s HBM2"},
	{"B200", 8e12, "B200 datasheet: 8 TB/s HBM3e"},
}

// HBMPeak returns the GPU's peak memory bandwidth in bytes/s, the rate a
// memory-bound pass's bound divides its bytes by, and the source of the
// number. A GPU named in the datasheet table gets its datasheet figure (an
// H200: 4.8e12). Any other falls back to what the driver reports:
//
//	peak = 2 (double data rate) × memory clock × bus width / 8
//
// (an H100 SXM reports 2619 MHz and 5120 bits: 3.35e12), the source saying
// so. Without the table's name nor the clock and width, it is an error
// that says to give the peak.
func (i Info) HBMPeak() (bytesPerS float64, source string, err error) {
	for _, g := range hbmByName {
		if strings.Contains(i.Name, g.name) {
			return g.bytesPerS, g.from, nil
		}
	}
	if i.MemClockKHz <= 0 || i.MemBusBits <= 0 {
		return 0, "", fmt.Errorf("GPU %d (%s): no datasheet bandwidth known, and %d kHz memory clock x %d bits: cannot derive the peak: give it (--hbm-peak)",
			i.Ordinal, i.Name, i.MemClockKHz, i.MemBusBits)
	}
	bytesPerS = 2 * float64(i.MemClockKHz) * 1e3 * float64(i.MemBusBits) / 8
	return bytesPerS, fmt.Sprintf("%s: not in the datasheet table; from the driver: 2 x %d MHz memory clock x %d bits / 8", i.Name, i.MemClockKHz/1000, i.MemBusBits), nil
}
