package stepbench

import (
	"slices"
	"strings"
	"testing"

	"dflash/tensor"
)

// phaseRecorder is the CPU backend as a tensor.Profiler that records the
// phases it is told, in order, and reports one op per phase.
type phaseRecorder struct {
	*tensor.CPU[float32]
	on     bool
	phases []string
}

func (p *phaseRecorder) StartProfile() { p.on, p.phases = true, nil }
func (p *phaseRecorder) ProfilePhase(name string) {
	if p.on {
		p.phases = append(p.phases, name)
	}
}
func (p *phaseRecorder) StopProfile() ([]tensor.OpTime, error) {
	p.on = false
	var ops []tensor.OpTime
	for _, ph := range p.phases {
		ops = append(ops, tensor.OpTime{Phase: ph, Op: "op", Calls: 1, MS: 1})
	}
	return ops, nil
}

// TestProfileNamesEveryPhase: with Profile set, RunOn runs one more step on
// a profiling backend with the phases named in the order the step runs them
// (the report's phases, then the block mask built apart) and reports the
// backend's op times; a backend that cannot profile is an error naming it.
func TestProfileNamesEveryPhase(t *testing.T) {
	o := tinyOptions()
	o.Steps, o.Warmup, o.Profile = 1, 0, true
	rec := &phaseRecorder{CPU: tensor.NewCPU[float32](1)}
	rep, err := RunOn(o, CPUDevice(rec))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"input_assembly", "target_forward", "drafter_forward", "backward", "optimizer", "block_mask (built again, apart)"}
	if !slices.Equal(rec.phases, want) {
		t.Errorf("phases %q, want %q", rec.phases, want)
	}
	if len(rep.Ops) != len(want) || rep.Ops[0].Phase != want[0] {
		t.Errorf("report ops %+v: want the backend's %d", rep.Ops, len(want))
	}
	_, err = RunOn(o, CPUDevice(tensor.NewCPU[float32](1)))
	if err == nil || !strings.Contains(err.Error(), "--profile: the cpu") {
		t.Errorf("profile on the CPU backend: %v, want an error naming the backend", err)
	}
}
