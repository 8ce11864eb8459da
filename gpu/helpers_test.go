package gpu_test

import (
	"fmt"
	"math"
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

// bf16 and f16 helpers. Test inputs are drawn on grids that both formats
// hold exactly (k/32 with |k| < 256), so encoding needs no rounding and the
// float64 reference sees exactly the device's inputs.

func bf16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0xffff != 0 {
		panic(fmt.Sprintf("%v is not exact in bf16", f))
	}
	return uint16(b >> 16)
}

func bf16Value(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func f16Bits(f float32) uint16 {
	if f == 0 {
		return 0
	}
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	if exp <= 0 || exp >= 31 || mant&0x1fff != 0 {
		panic(fmt.Sprintf("%v is not an exact normal f16", f))
	}
	return sign | uint16(exp)<<10 | uint16(mant>>13)
}

func f16Value(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h >> 10 & 0x1f)
	mant := float32(h & 0x3ff)
	switch exp {
	case 0:
		return sign * mant / 1024 * float32(math.Pow(2, -14))
	case 31:
		if mant == 0 {
			return sign * float32(math.Inf(1))
		}
		return float32(math.NaN())
	}
	return sign * (1 + mant/1024) * float32(math.Pow(2, float64(exp-15)))
}

func TestHalfHelpers(t *testing.T) {
	for _, v := range []float32{1, -2.5, 0.03125, 7.96875, -0.5, 3} {
		if got := bf16Value(bf16Bits(v)); got != v {
			t.Errorf("bf16 round trip %v -> %v", v, got)
		}
		if got := f16Value(f16Bits(v)); got != v {
			t.Errorf("f16 round trip %v -> %v", v, got)
		}
	}
	if f16Value(0x3c00) != 1 || f16Value(0xc000) != -2 || f16Value(0x0001) != float32(math.Pow(2, -24)) {
		t.Error("f16 decode of known bit patterns")
	}
}
