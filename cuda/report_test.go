package cuda_test

import (
	"testing"

	"dflash/internal/checkreport"
)

// report records one check result (see package checkreport).
func report(t *testing.T, check string, pass bool, detail string, metrics map[string]float64) {
	t.Helper()
	checkreport.Write(t, "cuda", check, pass, detail, metrics)
}
