package train

import (
	"context"
	"testing"
)

// shadowDevice is a Device whose "device memory" is the model's own
// parameters and a second AdamW over them, apart from the run's host
// mirrors: Run must reach the model's state only through the Device.
type shadowDevice struct {
	params []*Param
	opt    *AdamW
	pulls  int
}

func newShadow(params []*Param, cfg Config) *shadowDevice {
	return &shadowDevice{params: params, opt: NewAdamW(params, AdamWConfig{Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay})}
}

func (s *shadowDevice) ZeroGrads()                     { ZeroGrads(s.params) }
func (s *shadowDevice) ScaleGrads(x float32)           { ScaleGrads(s.params, x) }
func (s *shadowDevice) ClipGradNorm(m float64) float64 { return ClipGradNorm(s.params, m) }
func (s *shadowDevice) Step(lr float64)                { s.opt.Step(lr) }

// GradRange makes the shadow device reachable by a Collective.
func (s *shadowDevice) GradRange(lo, hi int) Buffer { return hostGrads(s.params)(lo, hi) }

func (s *shadowDevice) Pull(params []*Param, opt *AdamW) error {
	s.pulls++
	copyState(params, opt, s.params, s.opt)
	return nil
}

func (s *shadowDevice) Push(params []*Param, opt *AdamW) error {
	copyState(s.params, s.opt, params, opt)
	return nil
}

// copyState copies values, moments and step counts from (sp, so) to (dp, do).
func copyState(dp []*Param, do *AdamW, sp []*Param, so *AdamW) {
	for i := range dp {
		copy(dp[i].Data, sp[i].Data)
	}
	dm, dv, ds := do.State()
	sm, sv, ss := so.State()
	copy(dm, sm)
	copy(dv, sv)
	copy(ds, ss)
}

// mirrors returns host mirrors of ps: same names and shapes, no gradients.
func mirrors(ps []*Param) []*Param {
	out := make([]*Param, len(ps))
	for i, p := range ps {
		out[i] = &Param{Name: p.Name, Shape: p.Shape, Data: make([]float32, len(p.Data))}
	}
	return out
}

// TestDeviceRunMatchesHost: a run whose state lives behind a Device, stopped
// halfway and resumed in a fresh process, ends bit-identical to a plain host
// run, and its checkpoints hold the device's state (pulled before each).
func TestDeviceRunMatchesHost(t *testing.T) {
	const seed, steps, stop = 7, 14, 6
	host := newTask(seed, 12)
	cfg := testConfig(t.TempDir(), steps)
	cfg.Seed, cfg.GradAccum = seed, 2
	mustRun(t, context.Background(), cfg, host.hooks())
	want := snapshot(host.m.params())

	withDevice := func(tk *task) (Hooks, *shadowDevice) {
		h := tk.hooks()
		dev := newShadow(h.Params, cfg)
		h.Params, h.Device = mirrors(h.Params), dev
		return h, dev
	}
	cfg2 := cfg
	cfg2.Out, cfg2.StopAt = t.TempDir(), stop
	first := newTask(seed, 12)
	h, dev := withDevice(first)
	mustRun(t, context.Background(), cfg2, h)
	if dev.pulls == 0 {
		t.Fatal("no Pull before the checkpoints")
	}
	resumed := newTask(seed, 12)
	for _, p := range resumed.m.params() {
		clear(p.Data) // the device must get its values from the checkpoint, through Push
	}
	h, _ = withDevice(resumed)
	cfg2.StopAt, cfg2.Resume = 0, true
	mustRun(t, context.Background(), cfg2, h)
	assertSameBits(t, "params after a resumed device run", want, snapshot(resumed.m.params()))
}
