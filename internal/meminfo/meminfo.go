// Package meminfo reports the memory the host can give a process, for
// refusing an allocation up front with the numbers instead of failing in it.
package meminfo

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Available returns the kernel's estimate of memory available for new
// allocations without swapping (MemAvailable in /proc/meminfo), in bytes;
// ok is false where that file is missing (not Linux) or unreadable.
func Available() (bytes uint64, ok bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	n, err := parseAvailable(f)
	return n, err == nil
}

// parseAvailable reads the "MemAvailable: N kB" line of a /proc/meminfo.
func parseAvailable(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 || string(f[0]) != "MemAvailable:" {
			continue
		}
		n, err := strconv.ParseUint(string(f[1]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("meminfo: MemAvailable %q: %w", f[1], err)
		}
		if len(f) < 3 || string(f[2]) != "kB" {
			return 0, fmt.Errorf("meminfo: MemAvailable without the kB unit")
		}
		return n << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("meminfo: no MemAvailable line")
}

// Format writes a byte count for people: "12.3 GiB".
func Format(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", b)
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}
