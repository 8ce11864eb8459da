package recipe

import (
	"fmt"
	"log/slog"

	"dflash/gpu"
	"dflash/internal/meminfo"
	"dflash/model/dflash"
)

// availableMemory is meminfo.Available, replaced in tests.
var availableMemory = meminfo.Available

// stepMemory estimates a training step of the job (dflash.StepMemory) for
// its batches: --data.batch-size packed rows, or rows of its longest
// sample; with the evaluation cache beside it; it returns the row length
// too.
func (j *job) stepMemory() (dflash.Memory, int) {
	var m dflash.Memory
	longest := 0
	if j.pack != nil {
		m, longest = dflash.StepMemory(j.targetCfg, j.dc, j.spec.Data.BatchSize, j.pack.Len, j.pack.Blocks, 0), j.pack.Len
	} else {
		for _, set := range [][]dflash.Example{j.train, j.eval} {
			for _, e := range set {
				longest = max(longest, len(e.IDs))
			}
		}
		m = dflash.StepMemory(j.targetCfg, j.dc, j.spec.Data.BatchSize, longest, j.dc.NumAnchors, 0)
	}
	m.EvalCache = 4 * j.evalElems
	return m, longest
}

// fitEvalCache decides whether the evaluation cache (dflash.Session.
// EvalCache: the target's hidden states of the evaluation batches, kept
// after the first evaluation so that later ones run only the drafter) fits
// beside the step of estimate m in free bytes (free < 0: unknown, it fits)
// on where ("host" or "device"), and logs the decision. It returns m
// without the cache when the cache is off. An evaluation without it
// computes the same metrics, running the target again.
func (j *job) fitEvalCache(m dflash.Memory, free float64, where string) (dflash.Memory, bool) {
	if m.EvalCache == 0 {
		return m, false
	}
	cache := m.EvalCache
	m.EvalCache = 0
	if free >= 0 && m.Total() > free {
		return m, false // the step alone does not fit: the caller refuses it
	}
	if free >= 0 && m.Total()+cache > free {
		slog.Warn("eval cache off: every evaluation runs the target", "batches", j.evalBatches, "size", meminfo.Format(cache),
			"why", fmt.Sprintf("the step needs about %s on the %s, with the cache more than the %s free", meminfo.Format(m.Total()), where, meminfo.Format(free)))
		return m, false
	}
	slog.Info("eval cache", "batches", j.evalBatches, "size", meminfo.Format(cache), "on", where)
	m.EvalCache = cache
	return m, true
}

// checkMemory refuses, before any session, target or drafter is made, a
// run whose memory estimate exceeds the host's available memory: on the
// CPU the whole step (the target's and the drafter's weights, the
// drafter's gradients and AdamW moments, a step's activations); on CUDA
// the drafter's host weights, the device's share being checked on each
// rank (checkDeviceMemory).
func (j *job) checkMemory() error {
	avail, ok := availableMemory()
	m, longest := j.stepMemory()
	if j.spec.Device != "cuda" {
		free := -1.0
		if ok {
			free = float64(avail)
		}
		m, j.evalCache = j.fitEvalCache(m, free, "host")
	}
	if !ok {
		return nil
	}
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
// its target. On the lead rank, the one that evaluates, it decides whether
// the evaluation cache fits beside the step (fitEvalCache) and returns the
// decision; the other ranks keep none.
func (j *job) checkDeviceMemory(dev *gpu.Device, lead bool) (evalCache bool, err error) {
	free, _, err := dev.MemInfo()
	if err != nil {
		return false, err
	}
	m, longest := j.stepMemory()
	d := m.OnDevice()
	if lead {
		d, evalCache = j.fitEvalCache(d, float64(free), "device")
	} else {
		d.EvalCache = 0
	}
	if d.Total() <= float64(free) {
		return evalCache, nil
	}
	return false, fmt.Errorf("%s: the step needs about %s on the device (the drafter state in fp32 with its bf16 copy, the activations in bf16: %s), more than the %s free",
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
