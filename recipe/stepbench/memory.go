package stepbench

import (
	"fmt"

	"dflash/internal/meminfo"
	"dflash/model"
	"dflash/model/dflash"
)

// estimateMemory estimates the bytes of a step of drafter dc over o's
// target, sequences and anchors.
func estimateMemory(o Options, dc *dflash.Config) dflash.Memory {
	return dflash.StepMemory(&o.Target, dc, o.Batch, o.SeqLen, o.LossChunk)
}

// availableMemory is meminfo.Available, replaced in tests.
var availableMemory = meminfo.Available

// checkMemory refuses a step whose estimate exceeds the memory available,
// naming the shape, each part of the estimate and both totals.
func checkMemory(o Options, tc *model.Config, m dflash.Memory) error {
	avail, ok := availableMemory()
	if !ok || m.Total() <= float64(avail) {
		return nil
	}
	return fmt.Errorf("--target-config %s, --seq-len %d, --batch %d, --anchors %d, --drafter-layers %d: the step needs about %s on the CPU "+
		"(target weights %s as float32, %.3g parameters; drafter weights, gradients and AdamW moments %s; activations %s), "+
		"more than the %s available (MemAvailable); choose a smaller target or shape",
		o.TargetName, o.SeqLen, o.Batch, o.Anchors, o.DrafterLayers, meminfo.Format(m.Total()),
		meminfo.Format(m.TargetWeights), tc.ParamCount(), meminfo.Format(m.DrafterState), meminfo.Format(m.Activations),
		meminfo.Format(float64(avail)))
}
