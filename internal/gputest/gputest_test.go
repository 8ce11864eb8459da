package gputest

import (
	"math"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/testseed"
)

func TestMain(m *testing.M) { Main(m) }

// TestRoundTripGPU uploads random values in every storage type and checks
// that the device holds them rounded as package dtype rounds them, and that
// Alloc's memory reads back as NaN.
func TestRoundTripGPU(t *testing.T) {
	w := Worker0(t)
	r := testseed.New(t)
	x := make([]float64, 1000)
	for i := range x {
		x[i] = r.NormFloat64() * 100
	}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F32} {
		err := w.Run(func(d *gpu.Device) error {
			b, held, err := Upload(d, dt, x)
			if err != nil {
				return err
			}
			defer d.Free(b)
			p, err := Alloc(d, int64(len(x)*dt.Size()))
			if err != nil {
				return err
			}
			defer d.Free(p)
			var got, poison []float64
			for _, c := range []struct {
				dst *[]float64
				b   gpu.Buffer
			}{{&got, b}, {&poison, p}} {
				if *c.dst, err = Download(d, dt, c.b, len(x)); err != nil {
					return err
				}
			}
			for i, v := range x {
				want := float64(float32(v))
				if dt != dtype.F32 {
					h := []uint16{0}
					f := []float32{float32(v)}
					dtype.EncodeHalves(dt, h, f)
					dtype.DecodeHalves(dt, f, h)
					want = float64(f[0])
				}
				if got[i] != want || held[i] != want {
					t.Errorf("%v element %d: device %v, Upload says %v, want %v", dt, i, got[i], held[i], want)
					return nil
				}
				if !math.IsNaN(poison[i]) {
					t.Errorf("%v: poisoned element %d reads %v, want NaN", dt, i, poison[i])
					return nil
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
