package stepbench

import (
	"fmt"
	"log/slog"
	"time"

	"dflash/gpu"
	"dflash/internal/meminfo"
	"dflash/jit"
	"dflash/model/dflash"
	"dflash/tensor/tensorcuda"
	"dflash/train"
)

// runCUDA runs o.Warmup and then o.Steps timed steps on GPU 0 through the
// CUDA tensor backend (bf16 activations and compute weights, fp32 master
// weights, gradients and AdamW moments), the whole benchmark on the GPU's
// worker thread, and reports their means with the device's peak memory.
func runCUDA(o Options) (*Report, error) {
	cache, err := jit.NewNVRTCCache(o.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	w, err := gpu.Open(0)
	if err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	defer gpu.CloseAll()
	dc := drafterConfig(o)
	mem := estimateMemory(o, dc)
	rep := newReport(o, dc, mem)
	rep.GPU = w.Info().Name
	slog.Info("bench step", "device", "cuda", "gpu", rep.GPU, "target", o.TargetName, "taps", dc.TargetLayerIDs, "drafter_layers", o.DrafterLayers,
		"seq_len", o.SeqLen, "batch", o.Batch, "anchors", o.Anchors)
	err = w.Run(func(d *gpu.Device) (err error) {
		defer tensorcuda.RecoverOOM(&err)
		if err := checkDeviceMemory(o, d, mem); err != nil {
			return err
		}
		b, err := tensorcuda.NewBackend(cache, d)
		if err != nil {
			return err
		}
		defer b.Close()
		dev := &device{backend: b, sync: d.Synchronize, reset: b.ResetStep,
			train: func(dr *dflash.Drafter[float32], cfg train.AdamWConfig) (train.Device, error) {
				return tensorcuda.NewTrainDevice(b, dr.Arena(), cfg)
			}}
		start := time.Now()
		s, err := newStepper(o, dc, dev)
		if err != nil {
			return err
		}
		if err := d.Synchronize(); err != nil {
			return err
		}
		rep.SetupMS = msf(time.Since(start))
		start = time.Now()
		if _, err := s.step(); err != nil {
			return err
		}
		rep.FirstStepMS = msf(time.Since(start))
		if err := s.warm(); err != nil {
			return err
		}
		before := d.Counters()
		steps, walls, err := s.timed()
		if err != nil {
			return err
		}
		c := d.Counters().Since(before)
		n := int64(len(steps))
		rep.PerStep = &gpu.Counters{HtoDCalls: c.HtoDCalls / n, HtoDBytes: c.HtoDBytes / n, DtoHCalls: c.DtoHCalls / n,
			DtoHBytes: c.DtoHBytes / n, Syncs: c.Syncs / n}
		rep.PeakDeviceBytes = d.AllocStats().PeakBytes
		_, rep.StepArenaBytes = b.StepBytes()
		rep.finish(steps, walls)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// checkDeviceMemory refuses a shape whose estimate (bf16 target weights,
// the drafter's fp32 state and bf16 copy, bf16 activations: half the
// float32 estimate) exceeds the device's free memory.
func checkDeviceMemory(o Options, d *gpu.Device, m Memory) error {
	free, _, err := d.MemInfo()
	if err != nil {
		return err
	}
	need := m.TargetWeights/2 + m.DrafterState*18/16 + m.Activations/2
	if need <= float64(free) {
		return nil
	}
	return fmt.Errorf("--target-config %s, --seq-len %d, --batch %d, --anchors %d, --drafter-layers %d: the step needs about %s on the GPU, more than the %s free",
		o.TargetName, o.SeqLen, o.Batch, o.Anchors, o.DrafterLayers, meminfo.Format(need), meminfo.Format(float64(free)))
}
