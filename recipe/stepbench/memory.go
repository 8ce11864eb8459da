package stepbench

import (
	"fmt"

	"dflash/internal/meminfo"
	"dflash/model/dflash"
)

// estimateMemory estimates the bytes of a step of drafter dc over o's
// target, sequences and anchors.
func estimateMemory(o Options, dc *dflash.Config) dflash.Memory {
	return dflash.StepMemory(&o.Target, dc, o.Batch, o.SeqLen, dc.NumAnchors, o.LossChunk)
}

// availableMemory is meminfo.Available, replaced in tests.
var availableMemory = meminfo.Available

// checkMemory refuses a step whose estimate exceeds the memory available,
// naming the shape, each part of the estimate and both totals.
func checkMemory(o Options, dc *dflash.Config, m dflash.Memory) error {
	avail, ok := availableMemory()
	if !ok || m.Total() <= float64(avail) {
		return nil
	}
	return fmt.Errorf("--target-config %s, --seq-len %d, --batch %d, --anchors %d, --drafter-layers %d: the step needs about %s on the CPU "+
		"(%s), more than the %s available (MemAvailable); choose a smaller target or shape",
		o.TargetName, o.SeqLen, o.Batch, o.Anchors, o.DrafterLayers, meminfo.Format(m.Total()),
		m.Parts("float32", o.Target.ParamCount(), dc.ParamCount()), meminfo.Format(float64(avail)))
}
