package cuda_test

import (
	"encoding/json"
	"os"
	"testing"
)

// report appends one check result as a JSON line to $DFLASH_RESULTS (set by
// scripts/gpu-check.sh on the GPU machine); without it, it only logs.
func report(t *testing.T, check string, pass bool, detail string, metrics map[string]float64) {
	t.Helper()
	t.Logf("check %q pass=%v %s %v", check, pass, detail, metrics)
	path := os.Getenv("DFLASH_RESULTS")
	if path == "" {
		return
	}
	line, _ := json.Marshal(map[string]any{"pkg": "cuda", "check": check, "pass": pass, "detail": detail, "metrics": metrics})
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("report: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		t.Errorf("report: %v", err)
	}
}
