package gpu_test

import (
	"testing"

	"dflash/internal/checkreport"
	"dflash/internal/gputest"
)

func TestMain(m *testing.M) { gputest.Main(m) }

// report records one check result (see package checkreport).
func report(t testing.TB, check string, pass bool, detail string, metrics map[string]float64) {
	t.Helper()
	checkreport.Write(t, "gpu", check, pass, detail, metrics)
}
