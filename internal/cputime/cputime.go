//go:build unix

// Package cputime reads the CPU time the process has used. Benchmarks
// report it beside wall time: on a machine shared with other processes
// wall time measures the load as much as the code.
package cputime

import "syscall"

// Seconds returns the user and system CPU time of the process so far.
func Seconds() float64 {
	var r syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
		return 0
	}
	return float64(r.Utime.Nano()+r.Stime.Nano()) / 1e9
}
