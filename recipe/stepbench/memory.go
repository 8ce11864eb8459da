package stepbench

import (
	"fmt"

	"dflash/internal/meminfo"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
)

// Memory is the estimate, in bytes, of what one step holds on the CPU
// (float32 throughout), made before anything is allocated.
type Memory struct {
	TargetWeights float64 `json:"target_weights"`
	// DrafterState is the drafter's weights, gradients and the two AdamW
	// moments: 16 bytes a parameter.
	DrafterState float64 `json:"drafter_state"`
	// Activations is a rough upper estimate: the target's tapped hidden
	// states and one layer's working set, plus the drafter's forward
	// activations and as much again for their gradients, plus the
	// cross-entropy's chunks (docs/PERF.md compares it with measured peaks).
	Activations float64 `json:"activations"`
}

// Total returns the estimated bytes.
func (m Memory) Total() float64 { return m.TargetWeights + m.DrafterState + m.Activations }

// DrafterParams returns the number of parameters of drafter c: fc,
// hidden_norm, the layers (norms, projections, QK-norms) and the final norm.
func DrafterParams(c *dflash.Config) float64 {
	H, I, D := float64(c.HiddenSize), float64(c.IntermediateSize), float64(c.HeadDim)
	q, kv := float64(c.NumHeads)*D, float64(c.NumKVHeads)*D
	layer := 2*H + 2*q*H + 2*kv*H + 3*I*H + 2*D
	return float64(len(c.TargetLayerIDs))*H*H + H + float64(c.NumLayers)*layer + H
}

// estimateMemory estimates the bytes of a step of drafter dc over o's
// target, sequences and anchors.
func estimateMemory(o Options, dc *dflash.Config) Memory {
	const f32 = 4
	tc, rows, seqLen, anchors := &o.Target, o.Batch, o.SeqLen, o.Anchors
	chunk := float64(tensor.DefaultXentChunk)
	if o.LossChunk > 0 {
		chunk = float64(o.LossChunk) * float64(tc.VocabSize)
	}
	H, I, D := float64(tc.HiddenSize), float64(tc.IntermediateSize), float64(tc.HeadDim)
	q, kv := float64(tc.NumHeads)*D, float64(tc.NumKVHeads)*D
	T, nb, k := float64(rows*seqLen), float64(rows*anchors*dc.BlockSize), float64(len(dc.TargetLayerIDs))
	taps := k * T * H
	target := taps + T*(4*H+3*q+4*kv+3*I)
	perLayer := 4*T*kv + 4*(T+nb)*kv + nb*(6*H+5*q+3*I)
	drafter := 2*taps + 3*T*H + 2*float64(dc.NumLayers)*perLayer + nb*H + 2*chunk
	return Memory{
		TargetWeights: f32 * tc.ParamCount(),
		DrafterState:  4 * f32 * DrafterParams(dc),
		Activations:   f32 * (target + drafter),
	}
}

// availableMemory is meminfo.Available, replaced in tests.
var availableMemory = meminfo.Available

// checkMemory refuses a step whose estimate exceeds the memory available,
// naming the shape, each part of the estimate and both totals.
func checkMemory(o Options, tc *model.Config, m Memory) error {
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
