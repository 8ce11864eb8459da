package tensorcuda

import (
	"strings"
	"testing"

	"dflash/gpu"
	"dflash/internal/switches"
)

// TestGemmSettings: DFLASH_GEMM_TUNE and DFLASH_GEMM_WORKSPACE_MIB as the
// backend reads them (the registry's rules); a bad value is an error naming
// the variable. The registry's default workspace is the device's.
func TestGemmSettings(t *testing.T) {
	if switches.GemmWorkspaceMiB.Default<<20 != gpu.GemmWorkspace {
		t.Errorf("%s defaults to %d MiB, gpu.GemmWorkspace is %d bytes", switches.GemmWorkspaceMiB.Name, switches.GemmWorkspaceMiB.Default, gpu.GemmWorkspace)
	}
	for _, c := range []struct {
		tune, ws string
		on       bool
		bytes    int64
		err      string // a part of the error; "" for none
	}{
		{"", "", true, 0, ""},
		{"0", "", false, 0, ""},
		{"off", "", false, 0, ""},
		{"1", "", true, 0, ""},
		{"yes", "32", true, 0, ""},
		{"1", "128", true, 128 << 20, ""},
		{"", "256", true, 256 << 20, ""},
		{"2", "", false, 0, "DFLASH_GEMM_TUNE=\"2\""},
		{"", "0", false, 0, "DFLASH_GEMM_WORKSPACE_MIB=\"0\""},
		{"", "32MiB", false, 0, "DFLASH_GEMM_WORKSPACE_MIB=\"32MiB\""},
		{"", "5000", false, 0, "from 1 to 4096"},
	} {
		t.Setenv(switches.GemmTune.Name, c.tune)
		t.Setenv(switches.GemmWorkspaceMiB.Name, c.ws)
		on, bytes, err := gemmSettings()
		switch {
		case c.err == "" && err != nil:
			t.Errorf("(%q, %q): %v", c.tune, c.ws, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("(%q, %q): error %v, want one containing %s", c.tune, c.ws, err, c.err)
		case c.err == "" && (on != c.on || bytes != c.bytes):
			t.Errorf("(%q, %q) = %v, %d; want %v, %d", c.tune, c.ws, on, bytes, c.on, c.bytes)
		}
	}
}
