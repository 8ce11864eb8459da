// Package checkreport records the results of GPU checks that run as compiled
// test binaries on the GPU machine, so that its scripts (scripts/gpu-check.sh)
// can print one summary table for every package.
package checkreport

import (
	"encoding/json"
	"os"
	"testing"

	"dflash/internal/switches"
)

// Write logs one check result on t and, when $DFLASH_RESULTS names a file,
// appends it there as a JSON line {"pkg","check","pass","detail","metrics"}.
func Write(t testing.TB, pkg, check string, pass bool, detail string, metrics map[string]float64) {
	t.Helper()
	t.Logf("check %q pass=%v %s %v", check, pass, detail, metrics)
	path := switches.Results.Value()
	if path == "" {
		return
	}
	line, err := json.Marshal(map[string]any{"pkg": pkg, "check": check, "pass": pass, "detail": detail, "metrics": metrics})
	if err != nil {
		t.Errorf("checkreport: %v", err)
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("checkreport: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		t.Errorf("checkreport: %s: %v", path, err)
	}
}
