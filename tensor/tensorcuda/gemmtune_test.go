package tensorcuda

import (
	"strings"
	"testing"
)

func TestGemmSettings(t *testing.T) {
	for _, c := range []struct {
		tune, ws string
		on       bool
		bytes    int64
		err      string // a part of the error; "" for none
	}{
		{"", "", true, 0, ""},
		{"0", "", false, 0, ""},
		{"1", "", true, 0, ""},
		{"1", "128", true, 128 << 20, ""},
		{"", "256", true, 256 << 20, ""},
		{"yes", "", false, 0, "$DFLASH_GEMM_TUNE=\"yes\""},
		{"", "0", false, 0, "$DFLASH_GEMM_WORKSPACE_MIB=\"0\""},
		{"", "32MiB", false, 0, "$DFLASH_GEMM_WORKSPACE_MIB=\"32MiB\""},
		{"", "5000", false, 0, "from 1 to 4096"},
	} {
		on, bytes, err := gemmSettings(c.tune, c.ws)
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
