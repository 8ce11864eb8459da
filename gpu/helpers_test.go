package gpu_test

import (
	"fmt"
	"os"
	"testing"

	"dflash/gpu"
	"dflash/internal/checkreport"
	"dflash/jit"
)

func TestMain(m *testing.M) {
	gpu.SetDebug(true) // every GPU test runs with the foreign-thread check on
	code := m.Run()
	if err := gpu.CloseAll(); err != nil {
		fmt.Fprintln(os.Stderr, "CloseAll:", err)
		code = 1
	}
	os.Exit(code)
}

// worker0 opens GPU 0 or skips, naming what is missing.
func worker0(t testing.TB) *gpu.Worker {
	t.Helper()
	w, err := gpu.Open(0)
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	return w
}

// nvrtcCache returns a fresh NVRTC-backed cache on dir, or skips.
func nvrtcCache(t testing.TB, dir string) *jit.Cache {
	t.Helper()
	n, err := jit.NewNVRTC()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	c, err := jit.New(jit.Config{Compiler: n, Dir: dir, Budget: 64})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// report records one check result (see package checkreport).
func report(t testing.TB, check string, pass bool, detail string, metrics map[string]float64) {
	t.Helper()
	checkreport.Write(t, "gpu", check, pass, detail, metrics)
}
