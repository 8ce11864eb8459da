package meminfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestParseAvailable(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		err  string
	}{
		{"MemTotal:       131072000 kB\nMemFree:   1 kB\nMemAvailable:   98765432 kB\n", 98765432 << 10, ""},
		{"MemTotal: 5 kB\n", 0, "no MemAvailable"},
		{"MemAvailable: x kB\n", 0, "MemAvailable \"x\""},
		{"MemAvailable: 12\n", 0, "kB unit"},
	} {
		got, err := parseAvailable(strings.NewReader(c.in))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: got %v, want error %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: got %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestAvailableOnLinux(t *testing.T) {
	n, ok := Available()
	if runtime.GOOS != "linux" {
		t.Skipf("no /proc/meminfo on %s", runtime.GOOS)
	}
	if !ok || n < 1<<20 {
		t.Fatalf("Available() = %d, %v on Linux", n, ok)
	}
}

func TestFormat(t *testing.T) {
	for in, want := range map[float64]string{0: "0 B", 1000: "1000 B", 1023: "1023 B", 1536: "1.5 KiB", 3 << 30: "3.0 GiB", 141 << 30: "141.0 GiB", 4e12 * 1024: "3.6 PiB"} {
		if got := Format(in); got != want {
			t.Errorf("Format(%g) = %q, want %q", in, got, want)
		}
	}
}
