package dflash

import (
	"fmt"

	"dflash/internal/meminfo"
	"dflash/model"
	"dflash/tensor"
)

// Memory is the estimate, in bytes, of what one training step holds on the
// CPU (float32 throughout), made before anything is allocated.
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
	// EvalCache is the evaluation cache that the run keeps beside the step
	// (Session.EvalCache), 4 bytes for each of EvalCacheSize's elements; 0
	// without it.
	EvalCache float64 `json:"eval_cache"`
}

// Total returns the estimated bytes on the CPU.
func (m Memory) Total() float64 {
	return m.TargetWeights + m.DrafterState + m.Activations + m.EvalCache
}

// OnDevice returns the estimate on a GPU: bf16 target weights, the
// drafter's fp32 state and its bf16 compute copy, bf16 activations and
// evaluation cache (half the float32 estimate; tensor.Backend.AllocKeep
// keeps bf16 on CUDA).
func (m Memory) OnDevice() Memory {
	return Memory{TargetWeights: m.TargetWeights / 2, DrafterState: m.DrafterState * 18 / 16, Activations: m.Activations / 2,
		EvalCache: m.EvalCache / 2}
}

// Device returns the estimated bytes on a GPU, OnDevice's total.
func (m Memory) Device() float64 { return m.OnDevice().Total() }

// Parts names each part of the estimate, for a message that refuses a step:
// the target's weights (as weights, "float32" or "bf16") and the drafter's
// state with their parameter counts, and the activations.
func (m Memory) Parts(weights string, targetParams, drafterParams float64) string {
	return fmt.Sprintf("target weights %s as %s, %.3g parameters; drafter weights, gradients and AdamW moments %s, %.3g parameters; activations %s",
		meminfo.Format(m.TargetWeights), weights, targetParams, meminfo.Format(m.DrafterState), drafterParams, meminfo.Format(m.Activations))
}

// ParamCount returns the number of parameters of a drafter of c: fc,
// hidden_norm, the layers (norms, projections, QK-norms) and the final
// norm, in float64 so that an absurd config cannot overflow it (exact below
// 2^53).
func (c *Config) ParamCount() float64 {
	H, I, D := float64(c.HiddenSize), float64(c.IntermediateSize), float64(c.HeadDim)
	q, kv := float64(c.NumHeads)*D, float64(c.NumKVHeads)*D
	layer := 2*H + 2*q*H + 2*kv*H + 3*I*H + 2*D
	return float64(len(c.TargetLayerIDs))*H*H + H + float64(c.NumLayers)*layer + H
}

// ProposeParams returns the parameters one proposal of a drafter of c
// reads whole (Drafter.Propose): its layers, its final norm and the
// target's LM head, vocab × hidden; not fc and hidden_norm, which Extend
// reads, nor the embedding, whose rows it gathers.
func (c *Config) ProposeParams() float64 {
	H := float64(c.HiddenSize)
	return c.ParamCount() - float64(len(c.TargetLayerIDs))*H*H - H + float64(c.VocabSize)*H
}

// StepMemory estimates the bytes of a training step of drafter dc over
// target tc for rows rows of seqLen tokens with blocks anchor blocks each
// (dc.NumAnchors for a sample a row; a packed row's Packing.Blocks),
// lossChunk block slots a cross-entropy chunk (<= 0: the default chunk).
func StepMemory(tc *model.Config, dc *Config, rows, seqLen, blocks, lossChunk int) Memory {
	const f32 = 4
	chunk := float64(tensor.DefaultXentChunk)
	if lossChunk > 0 {
		chunk = float64(lossChunk) * float64(tc.VocabSize)
	}
	H, I, D := float64(tc.HiddenSize), float64(tc.IntermediateSize), float64(tc.HeadDim)
	q, kv := float64(tc.NumHeads)*D, float64(tc.NumKVHeads)*D
	T := float64(rows) * float64(seqLen)
	nb := float64(rows) * float64(blocks) * float64(dc.BlockSize)
	k := float64(len(dc.TargetLayerIDs))
	taps := k * T * H
	target := taps + T*(4*H+3*q+4*kv+3*I)
	perLayer := 4*T*kv + 4*(T+nb)*kv + nb*(6*H+5*q+3*I)
	drafter := 2*taps + 3*T*H + 2*float64(dc.NumLayers)*perLayer + nb*H + 2*chunk
	return Memory{
		TargetWeights: f32 * tc.ParamCount(),
		DrafterState:  4 * f32 * dc.ParamCount(),
		Activations:   f32 * (target + drafter),
	}
}
