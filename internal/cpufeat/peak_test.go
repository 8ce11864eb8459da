package cpufeat

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestParseCPUInfo: physical cores are distinct (physical id, core id)
// pairs, hyperthreads not counted twice; the clock is the highest listed.
func TestParseCPUInfo(t *testing.T) {
	var b strings.Builder
	// Two sockets of two cores, two hyperthreads each: 8 processors, 4 cores.
	for p := range 8 {
		b.WriteString("processor\t: " + string(rune('0'+p)) + "\nmodel name\t: test\n")
		b.WriteString("physical id\t: " + string(rune('0'+p/4)) + "\n")
		b.WriteString("core id\t\t: " + string(rune('0'+p%2)) + "\n")
		mhz := "2400.000"
		if p == 5 {
			mhz = "3100.250"
		}
		b.WriteString("cpu MHz\t\t: " + mhz + "\n\n")
	}
	cores, mhz := parseCPUInfo(strings.NewReader(b.String()))
	if cores != 4 || mhz != 3100.25 {
		t.Fatalf("%d cores at %v MHz, want 4 at 3100.25", cores, mhz)
	}
	if cores, mhz := parseCPUInfo(strings.NewReader("processor\t: 0\nBogoMIPS\t: 50.00\n")); cores != 0 || mhz != 0 {
		t.Fatalf("an arm64-style file without core ids or clock: %d cores, %v MHz", cores, mhz)
	}
}

// TestPeakTFLOPS: the peak is cores x clock x FLOP/cycle, at most threads
// cores, and says where its numbers came from.
func TestPeakTFLOPS(t *testing.T) {
	one, src := PeakTFLOPS(1)
	if one == 0 {
		t.Skipf("no peak on this machine: %s", src)
	}
	all, _ := PeakTFLOPS(0)
	if all < one || !strings.Contains(src, "1 cores x") || !strings.Contains(src, "/proc/cpuinfo") {
		t.Fatalf("1 thread %g TFLOP/s (%s), all %g", one, src, all)
	}
	// One core: the clock (rounded to a MHz in the source) times the
	// FLOP/cycle the source names.
	var mhz float64
	var per int
	if _, err := fmt.Sscanf(src, "CPU float32: 1 cores x %f MHz (/proc/cpuinfo) x %d FLOP/cycle", &mhz, &per); err != nil {
		t.Fatalf("source %q: %v", src, err)
	}
	if want := mhz * 1e6 * float64(per) / 1e12; math.Abs(one/want-1) > 1e-3 || (per != FMAFLOPsPerCycle && per != PlainFLOPsPerCycle) {
		t.Fatalf("%g TFLOP/s, want %g (%s)", one, want, src)
	}
	t.Log(src)
}
