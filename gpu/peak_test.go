package gpu

import (
	"math"
	"strings"
	"testing"
)

// TestDenseBF16Peak: the peak from given attributes against NVIDIA's
// published dense bf16 figures at the clocks the datasheets assume, and an
// H200 at the highest clock its driver reports (1980 MHz).
func TestDenseBF16Peak(t *testing.T) {
	for _, c := range []struct {
		name         string
		major, minor int
		sms, mhz     int
		want         float64 // TFLOP/s
	}{
		{"H200 SXM at 1980 MHz", 9, 0, 132, 1980, 4096 * 132 * 1.98e9 / 1e12},
		{"H100 SXM at 1830 MHz", 9, 0, 132, 1830, 989.4},
		{"H100 PCIe at 1620 MHz", 9, 0, 114, 1620, 756},
		{"A100 at 1410 MHz", 8, 0, 108, 1410, 312},
		{"A6000 at 1800 MHz", 8, 6, 84, 1800, 309.7 / 2}, // the datasheet's 309.7 is with sparsity
	} {
		t.Run(c.name, func(t *testing.T) {
			i := Info{Name: c.name, Major: c.major, Minor: c.minor, SMs: c.sms, ClockKHz: c.mhz * 1000}
			got, src, err := i.DenseBF16Peak()
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got/c.want-1) > 1e-3 {
				t.Fatalf("%g TFLOP/s, want %g (%s)", got, c.want, src)
			}
			if !strings.Contains(src, i.Arch()) || !strings.Contains(src, "SMs") {
				t.Fatalf("source %q names neither the architecture nor the SMs", src)
			}
		})
	}
	for _, i := range []Info{{Name: "Volta", Major: 7, Minor: 0, SMs: 80, ClockKHz: 1530000}, {Name: "no clock", Major: 9, SMs: 132}} {
		if _, _, err := i.DenseBF16Peak(); err == nil || !strings.Contains(err.Error(), "--peak-tflops") {
			t.Errorf("%s: err %v, want one that says to give --peak-tflops", i.Name, err)
		}
	}
}

// TestHBMPeak: datasheet GPUs by the names their drivers report (a variant
// before its family), the fallback from the memory clock and bus width
// against the H100 SXM's published 3.35 TB/s at its 2619 MHz and 5120
// bits, and an unknown GPU without them an error naming --hbm-peak.
func TestHBMPeak(t *testing.T) {
	for _, c := range []struct {
		name      string
		mhz, bits int
		want      float64
		datasheet bool
	}{
		{"NVIDIA H200", 3201, 6144, 4.8e12, true},
		{"NVIDIA H100 80GB HBM3", 2619, 5120, 3.35e12, true},
		{"NVIDIA H100 PCIe", 1593, 5120, 2.0e12, true},
		{"NVIDIA A100-SXM4-80GB", 1593, 5120, 2.039e12, true},
		{"NVIDIA A100-SXM4-40GB", 1215, 5120, 1.555e12, true},
		{"unlisted part, memory as the SXM5 Hopper", 2619, 5120, 3.35e12, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := Info{Name: c.name, MemClockKHz: c.mhz * 1000, MemBusBits: c.bits}
			got, src, err := i.HBMPeak()
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got/c.want-1) > 1e-3 {
				t.Fatalf("%g bytes/s, want %g (%s)", got, c.want, src)
			}
			if fromDriver := strings.Contains(src, "driver"); fromDriver == c.datasheet {
				t.Fatalf("source %q: datasheet %v", src, c.datasheet)
			}
		})
	}
	if _, _, err := (Info{Name: "unknown"}).HBMPeak(); err == nil || !strings.Contains(err.Error(), "--hbm-peak") {
		t.Errorf("err %v, want one that says to give --hbm-peak", err)
	}
}
