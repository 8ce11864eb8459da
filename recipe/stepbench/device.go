package stepbench

import (
	"fmt"
	"log/slog"
	"time"

	"dflash/internal/meminfo"
	"dflash/model/dflash"
)

// RunOn runs the benchmark o on dev, a device the caller opened (on a GPU:
// from the GPU's worker thread, where every call of the backend must come
// from): the models made and placed (timed as setup), a first step (kernel
// compilation or cache loads included), o.Warmup and then o.Steps timed
// steps, their phases timed on dev.Clock (or separated by dev.Sync).
func RunOn(o Options, dev *Env) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o, _ = o.normalized()
	dc := drafterConfig(o)
	mem := estimateMemory(o, dc)
	if dev.Free != nil {
		if err := checkDeviceMemory(o, dev.Free, mem); err != nil {
			return nil, err
		}
	}
	rep := newReport(o, dc, mem, dev)
	slog.Info("bench step", "device", o.Device, "backend", dev.Backend.Name(), "target", o.TargetName, "taps", dc.TargetLayerIDs,
		"drafter_layers", o.DrafterLayers, "seq_len", o.SeqLen, "batch", o.Batch, "anchors", o.Anchors)
	start := time.Now()
	s, err := newStepper(o, dc, dev)
	if err != nil {
		return nil, err
	}
	if err := dev.Sync(); err != nil {
		return nil, err
	}
	rep.SetupMS = msf(time.Since(start))
	start = time.Now()
	if _, err := s.step(); err != nil {
		return nil, err
	}
	rep.FirstStepMS = msf(time.Since(start))
	if err := s.warm(); err != nil {
		return nil, err
	}
	var measured func(*Report, int)
	if dev.Measure != nil {
		measured = dev.Measure()
	}
	steps, walls, err := s.timed()
	if err != nil {
		return nil, err
	}
	if measured != nil {
		measured(rep, len(steps))
	}
	rep.finish(steps, walls)
	if o.Profile {
		if rep.Ops, err = s.profile(); err != nil {
			return nil, err
		}
	}
	if o.TargetFP8 {
		if rep.TapRelErr, err = s.tapErrors(); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// checkDeviceMemory refuses a shape whose device estimate (Memory.Device)
// exceeds the device's free memory.
func checkDeviceMemory(o Options, free func() (int64, error), m dflash.Memory) error {
	f, err := free()
	if err != nil {
		return err
	}
	need := m.Device()
	if need <= float64(f) {
		return nil
	}
	return fmt.Errorf("--target-config %s, --seq-len %d, --batch %d, --anchors %d, --drafter-layers %d: the step needs about %s on the device, more than the %s free",
		o.TargetName, o.SeqLen, o.Batch, o.Anchors, o.DrafterLayers, meminfo.Format(need), meminfo.Format(float64(f)))
}
