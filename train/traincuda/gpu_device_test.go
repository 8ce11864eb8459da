package traincuda

import (
	"math"
	"testing"

	"dflash/gpu"
	"dflash/internal/testseed"
	"dflash/tensor/tensorcuda"
	"dflash/train"
)

// TestGPUDevice runs the Device of a placed arena beside
// train.HostDevice on the same values and gradients: scaled and clipped
// gradients give the same norm (float64 sums in another order: 1e-9
// relative), the AdamW steps the same values (1e-6, as TestGPUAdamWArena),
// and Pull and Push carry values, moments and the step count between the
// device and host mirrors exactly.
func TestGPUDevice(t *testing.T) {
	r := testseed.New(t)
	a, params := testArena(r, []paramSpec{{"fc.weight", []int{64, 300}}, {"norm.weight", []int{64}}, {"layers.0.mlp.up_proj.weight", []int{700, 64}}})
	cfg := train.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	ref := train.NewAdamW(params, cfg)
	host := train.HostDevice(params, ref)
	gpuBackend(t, func(d *gpu.Device, b *tensorcuda.Backend) error {
		a.Place(b, true)
		dev, err := NewDevice(b, a, cfg)
		if err != nil {
			return err
		}
		flat := make([]float32, a.Len())
		for k := 1; k <= 4; k++ {
			dev.ZeroGrads()
			host.ZeroGrads()
			for i := range flat {
				flat[i] = float32(r.NormFloat64())
			}
			for i, q := range params {
				copy(q.Grad, flat[a.Offset(i):])
			}
			b.WriteParams(a.Grad, flat)
			dev.ScaleGrads(0.5)
			host.ScaleGrads(0.5)
			maxNorm := []float64{0, 1e9, 3}[k%3] // measure only, no clipping, clipping
			got, want := dev.ClipGradNorm(maxNorm), host.ClipGradNorm(maxNorm)
			if math.Abs(got-want) > 1e-9*want {
				t.Fatalf("step %d: gradient norm %.12g, host %.12g", k, got, want)
			}
			dev.Step(1e-3 * float64(k))
			host.Step(1e-3 * float64(k))
		}
		mirrors := make([]*train.Param, len(params))
		for i, p := range params {
			mirrors[i] = &train.Param{Name: p.Name, Shape: p.Shape, Data: make([]float32, len(p.Data))}
		}
		pulled := train.NewAdamW(mirrors, cfg)
		if err := dev.Pull(mirrors, pulled); err != nil {
			return err
		}
		for i, q := range params {
			for j, want := range q.Data {
				if g := mirrors[i].Data[j]; math.Abs(float64(g-want)) > 1e-6*math.Abs(float64(want)) {
					t.Fatalf("%s[%d]: %g after 4 device steps, host %g", q.Name, j, g, want)
				}
			}
		}
		pm, pv, ps := pulled.State()
		rm, rv, rs := ref.State()
		for i := range rm {
			if math.Abs(float64(pm[i]-rm[i])) > 1e-6*math.Abs(float64(rm[i]))+1e-12 || math.Abs(float64(pv[i]-rv[i])) > 1e-6*math.Abs(float64(rv[i]))+1e-15 {
				t.Fatalf("moment %d: device m %g v %g, host m %g v %g", i, pm[i], pv[i], rm[i], rv[i])
			}
		}
		for i := range ps {
			if ps[i] != rs[i] {
				t.Fatalf("step count of parameter %d: %d pulled, %d on the host", i, ps[i], rs[i])
			}
		}
		// Push what the host holds, pull it back: the same bits.
		if err := dev.Push(params, ref); err != nil {
			return err
		}
		if err := dev.Pull(mirrors, pulled); err != nil {
			return err
		}
		for i, q := range params {
			for j, want := range q.Data {
				if mirrors[i].Data[j] != want {
					t.Fatalf("%s[%d]: %g after Push and Pull, pushed %g", q.Name, j, mirrors[i].Data[j], want)
				}
			}
		}
		if pm, _, _ := pulled.State(); pm[7] != rm[7] {
			t.Fatalf("moment 7: %g after Push and Pull, pushed %g", pm[7], rm[7])
		}
		return nil
	})
}
