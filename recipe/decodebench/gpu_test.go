package decodebench

import (
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/tensor/tensorcuda"
)

func TestMain(m *testing.M) { gputest.Main(m) }

// TestRunOnGPU runs the tiny benchmark on GPU 0 as `dflash bench decode
// --device cuda` does (events around each repetition, the device's launch
// count and peak): positive times, bf16 storage, the byte counts of bf16,
// launches counted in every pass, bounds from the GPU's own peak. It skips
// without a GPU.
func TestRunOnGPU(t *testing.T) {
	o := tinyOptions(t)
	o.Device, o.HBMPeak = "cuda", 0
	var rep *Report
	gputest.OnBackend(t, tensorcuda.NewBackend, func(d *gpu.Device, b *tensorcuda.Backend) error {
		env := &Env{Backend: b, Time: d.Time, Sync: d.Synchronize, Launches: d.Launches, Timing: "events",
			HBMPeak: func() (float64, string) {
				p, src, err := d.Info().HBMPeak()
				if err != nil {
					return 0, err.Error()
				}
				return p, src
			}}
		var err error
		rep, err = RunOn(o, env)
		return err
	})
	if rep.WeightDType != dtype.BF16.String() || rep.KVDType != dtype.BF16.String() || !(rep.HBMPeak > 0) {
		t.Errorf("weights %s, kv %s, peak %v (%s)", rep.WeightDType, rep.KVDType, rep.HBMPeak, rep.HBMPeakSource)
	}
	want := passBytes(o, drafterConfig(o), dtype.BF16, dtype.BF16)
	for i, p := range rep.Phases {
		if !(p.MinMS > 0 && p.MinMS <= p.MedianMS && p.BoundMS > 0) || p.Launches <= 0 || p.Bytes != want[i].Bytes {
			t.Errorf("%s: %+v; want positive times and launches, %d bytes", p.Name, p, want[i].Bytes)
		}
		t.Logf("%s: median %.3f ms, %d launches, bound %.4f ms", p.Name, p.MedianMS, p.Launches, p.BoundMS)
	}
}
