package recipe

import (
	"fmt"

	"dflash/gpu"
	"dflash/internal/meminfo"
	"dflash/model/dflash"
)

// availableMemory is meminfo.Available, replaced in tests.
var availableMemory = meminfo.Available

// stepMemory estimates a training step of the job (dflash.StepMemory) for
// its batches: --data.batch-size packed rows, or rows of its longest
// sample; it returns the row length too.
func (j *job) stepMemory() (dflash.Memory, int) {
	if j.pack != nil {
		return dflash.StepMemory(j.targetCfg, j.dc, j.spec.Data.BatchSize, j.pack.Len, j.pack.Blocks, 0), j.pack.Len
	}
	longest := 0
	for _, set := range [][]dflash.Example{j.train, j.eval} {
		for _, e := range set {
			longest = max(longest, len(e.IDs))
		}
	}
	return dflash.StepMemory(j.targetCfg, j.dc, j.spec.Data.BatchSize, longest, j.dc.NumAnchors, 0), longest
}

// checkMemory refuses, before any session, target or drafter is made, a
// run whose memory estimate exceeds the host's available memory: on the
// CPU the whole step (the target's and the drafter's weights, the
// drafter's gradients and AdamW moments, a step's activations); on CUDA
// the drafter's host weights, the device's share being checked on each
// rank (checkDeviceMemory).
func (j *job) checkMemory() error {
	avail, ok := availableMemory()
	if !ok {
		return nil
	}
	m, longest := j.stepMemory()
	tp, dp := j.targetCfg.ParamCount(), j.dc.ParamCount()
	need, what := m.Total(), fmt.Sprintf("the step needs about %s on the CPU (%s)", meminfo.Format(m.Total()), m.Parts("float32", tp, dp))
	if j.spec.Device == "cuda" {
		need = 4 * dp // the float32 master weights, made on the host
		what = fmt.Sprintf("the drafter's weights need %s on the host (%.4g parameters as float32)", meminfo.Format(need), dp)
	}
	if need <= float64(avail) {
		return nil
	}
	return fmt.Errorf("%s: %s, more than the %s available (MemAvailable)", j.shape(longest), what, meminfo.Format(float64(avail)))
}

// checkDeviceMemory refuses a rank's step whose device estimate
// (dflash.Memory.Device) exceeds dev's free memory, before the rank loads
// its target.
func (j *job) checkDeviceMemory(dev *gpu.Device) error {
	free, _, err := dev.MemInfo()
	if err != nil {
		return err
	}
	m, longest := j.stepMemory()
	d := m.OnDevice()
	if d.Total() <= float64(free) {
		return nil
	}
	return fmt.Errorf("%s: the step needs about %s on the device (the drafter state in fp32 with its bf16 copy, the activations in bf16: %s), more than the %s free",
		j.shape(longest), meminfo.Format(d.Total()), d.Parts("bf16", j.targetCfg.ParamCount(), j.dc.ParamCount()), meminfo.Format(float64(free)))
}

// shape names the sizes a step's memory grows with: the target's config
// fields, the drafter's and the batch's.
func (j *job) shape(longest int) string {
	tc, dc, s := j.targetCfg, j.dc, &j.spec
	return fmt.Sprintf("target %s/config.json (vocab_size %d, hidden_size %d, intermediate_size %d, num_hidden_layers %d), "+
		"drafter (%d layers, intermediate_size %d, %d taps, %s %d), %s %d rows of up to %d tokens (%s)",
		s.TargetDir, tc.VocabSize, tc.HiddenSize, tc.IntermediateSize, tc.NumLayers, dc.NumLayers, dc.IntermediateSize,
		len(dc.TargetLayerIDs), s.source("drafter.anchors"), dc.NumAnchors, s.source("data.batch-size"), s.Data.BatchSize, longest, j.rowsAre())
}

// rowsAre says what sets the length of a step's rows.
func (j *job) rowsAre() string {
	if j.pack != nil {
		return fmt.Sprintf("packed rows, %d anchor blocks each; %s", j.pack.Blocks, j.spec.source("data.pack-len"))
	}
	return "the longest sample"
}
