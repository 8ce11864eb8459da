package stepbench

import (
	"math"
	"slices"
	"strings"
	"testing"

	"dflash/model/dflash"
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
	rep, err := RunOn(o, CPUEnv(rec))
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
	_, err = RunOn(o, CPUEnv(tensor.NewCPU[float32](1)))
	if err == nil || !strings.Contains(err.Error(), "--profile: the cpu") {
		t.Errorf("profile on the CPU backend: %v, want an error naming the backend", err)
	}
}

// TestDrafterOnly: with DrafterOnly the target does not run (the step
// counts no target FLOPs), every step gets the same given hidden states of
// the batch's shape, and the drafter trains on them (a finite, positive
// loss) with the target's embedding and LM head.
func TestDrafterOnly(t *testing.T) {
	o := tinyOptions()
	o.Steps, o.Warmup, o.DrafterOnly = 2, 0, true
	dc := drafterConfig(o)
	s, err := newStepper(o, dc, CPUEnv(tensor.NewCPU[float32](1)))
	if err != nil {
		t.Fatal(err)
	}
	r1, err := s.step()
	if err != nil {
		t.Fatal(err)
	}
	var first []*tensor.Tensor
	b := dflash.MakeBatch(s.examples, s.rows, 0)
	if err := s.hidden(b); err != nil {
		t.Fatal(err)
	}
	first = append(first, b.Taps...)
	if err := s.hidden(b); err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if b.Taps[i] != first[i] || b.Taps[i].Numel() != o.Batch*o.SeqLen*dc.HiddenSize {
			t.Fatalf("tap %d: %v then %v, want the same given tensor of %d values", i, first[i], b.Taps[i], o.Batch*o.SeqLen*dc.HiddenSize)
		}
	}
	if r1.flops.TargetForward != 0 || r1.flops.DrafterForward <= 0 || math.IsNaN(r1.loss) || r1.loss <= 0 {
		t.Errorf("drafter-only step: flops %+v, loss %g", r1.flops, r1.loss)
	}
	if n := len(s.head.Embed.Shape); n != 2 || s.head.LMHead.Shape[0] != o.Target.VocabSize {
		t.Errorf("head %v / %v: want the target's vocabulary", s.head.Embed, s.head.LMHead)
	}
}
