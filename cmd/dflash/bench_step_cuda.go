package main

import (
	"time"

	"dflash/gpu"
	"dflash/recipe"
	"dflash/recipe/stepbench"
	"dflash/tensor/tensorcuda"
)

// benchStepCUDA runs the step benchmark o on GPU 0 through the CUDA tensor
// backend (bf16 activations and compute weights, fp32 master weights,
// gradients and AdamW moments), the whole of it on the GPU's worker
// thread, with kernels through the cache in cacheDir; the report adds the
// GPU's name, peak memory and per-step copies and synchronisations.
func benchStepCUDA(o stepbench.Options, cacheDir string) (*stepbench.Report, error) {
	var rep *stepbench.Report
	name, err := onGPU0(cacheDir, func(d *gpu.Device, b *tensorcuda.Backend) error {
		clock, err := newEventClock(d)
		if err != nil {
			return err
		}
		defer clock.destroy()
		dev := &stepbench.Env{Backend: b, Sync: d.Synchronize, Reset: b.ResetStep, Clock: clock, Peak: func() (float64, string) { return recipe.MFUPeak(0, d, 0) },
			Free: func() (int64, error) { free, _, err := d.MemInfo(); return free, err },
			Measure: func() func(*stepbench.Report, int) {
				before := d.Counters()
				d.ResetPeakMemory() // the timed steps' peaks, as the peer's torch.cuda.reset_peak_memory_stats
				return func(r *stepbench.Report, steps int) {
					c, n := d.Counters().Since(before), int64(max(steps, 1))
					r.PerStep = gpu.Counters{HtoDCalls: c.HtoDCalls / n, HtoDBytes: c.HtoDBytes / n, DtoHCalls: c.DtoHCalls / n,
						DtoHBytes: c.DtoHBytes / n, Syncs: c.Syncs / n}
					as := d.AllocStats()
					r.PeakDeviceBytes, r.PeakDeviceInUseBytes = as.PeakBytes, as.PeakInUseBytes
					st := b.StepBytes()
					r.StepArenaBytes, r.StepArenaReservedBytes, r.StepArenaMostReservedBytes = st.Peak, st.Reserved, st.MostReserved
					r.StepArenaInPlace = st.InPlace
				}
			}}
		rep, err = stepbench.RunOn(o, dev)
		return err
	})
	if err != nil {
		return nil, err
	}
	rep.GPU = name
	return rep, nil
}

// eventClock is a stepbench.PhaseClock of CUDA events on the default stream.
type eventClock struct{ ev []*gpu.Event }

// newEventClock makes the events of a step's phase boundaries.
func newEventClock(d *gpu.Device) (*eventClock, error) {
	c := &eventClock{}
	for range stepbench.NumPhases + 1 {
		e, err := d.NewEvent()
		if err != nil {
			c.destroy()
			return nil, err
		}
		c.ev = append(c.ev, e)
	}
	return c, nil
}

func (c *eventClock) Mark(i int) error { return c.ev[i].Record(nil) }

func (c *eventClock) Between(i, j int) (time.Duration, error) { return c.ev[j].Since(c.ev[i]) }

func (c *eventClock) destroy() {
	for _, e := range c.ev {
		e.Destroy()
	}
}
