package gpu

import "fmt"

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
