package cpufeat

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/cpu"
)

// FLOP per cycle and core of float32 arithmetic (a multiply-add is 2).
const (
	// FMAFLOPsPerCycle: two 8-wide fused multiply-adds a cycle (AVX2 and FMA).
	FMAFLOPsPerCycle = 32
	// PlainFLOPsPerCycle: a 4-wide multiply and a 4-wide add a cycle (SSE2,
	// or NEON without counting its fused multiply-add twice).
	PlainFLOPsPerCycle = 8
)

// PeakTFLOPS returns the float32 peak rate of threads cores of this CPU
// (threads <= 0: all of them) in TFLOP/s, the rate the MFU of a CPU training
// step divides by, and the source of the number, for the log:
//
//	peak = cores × clock × FLOP/cycle/core
//
// The cores are the physical cores /proc/cpuinfo lists (distinct physical id
// and core id; hyperthreads share their core's units), at most threads; the
// clock is the highest "cpu MHz" it lists (the clock the kernel last read; on
// a virtual machine the host's nominal clock); FLOP/cycle is
// FMAFLOPsPerCycle with AVX2 and FMA, else PlainFLOPsPerCycle. Without
// /proc/cpuinfo the clock is unknown: the peak is 0 (no MFU) and the source
// says to give it.
func PeakTFLOPS(threads int) (tflops float64, source string) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0, fmt.Sprintf("no CPU clock (%v): give the peak (--peak-tflops)", err)
	}
	defer f.Close()
	cores, mhz := parseCPUInfo(f)
	if mhz <= 0 {
		return 0, "no \"cpu MHz\" in /proc/cpuinfo: give the peak (--peak-tflops)"
	}
	if cores <= 0 {
		cores = runtime.NumCPU()
	}
	if threads > 0 {
		cores = min(cores, threads)
	}
	fma, per := cpu.X86.HasAVX2 && cpu.X86.HasFMA, PlainFLOPsPerCycle
	kind := "no AVX2/FMA"
	if fma {
		per, kind = FMAFLOPsPerCycle, "AVX2+FMA"
	}
	tflops = float64(cores) * mhz * 1e6 * float64(per) / 1e12
	return tflops, fmt.Sprintf("CPU float32: %d cores x %.0f MHz (/proc/cpuinfo) x %d FLOP/cycle (%s)", cores, mhz, per, kind)
}

// parseCPUInfo returns the physical cores (distinct physical id and core
// id pairs; 0 when the file names none) and the highest "cpu MHz" of a
// /proc/cpuinfo text.
func parseCPUInfo(r io.Reader) (cores int, mhz float64) {
	seen := map[[2]string]bool{}
	var phys string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "physical id":
			phys = v
		case "core id":
			seen[[2]string{phys, v}] = true
		case "cpu MHz":
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				mhz = max(mhz, x)
			}
		}
	}
	return len(seen), mhz
}
