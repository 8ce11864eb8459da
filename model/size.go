package model

import (
	"fmt"

	"dflash/internal/meminfo"
)

// ParamCount returns the number of scalar parameters c defines, in float64
// so that an absurd config.json cannot overflow it (exact below 2^53).
func (c *Config) ParamCount() float64 {
	H, I, D := float64(c.HiddenSize), float64(c.IntermediateSize), float64(c.HeadDim)
	q, kv := float64(c.NumHeads)*D, float64(c.NumKVHeads)*D
	layer := 2*H + 2*q*H + 2*kv*H + 3*I*H // norms, q and o, k and v, gate up down
	if c.AttentionBias {
		layer += q + 2*kv + H
	}
	if c.Arch == Qwen3 {
		layer += 2 * D
	}
	if c.MLPBias && c.Arch == Llama {
		layer += 2*I + H
	}
	n := float64(c.VocabSize)*H + H + float64(c.NumLayers)*layer
	if !c.TieWordEmbeddings {
		n += float64(c.VocabSize) * H
	}
	return n
}

// availableMemory is meminfo.Available, replaced in tests.
var availableMemory = meminfo.Available

// checkMemory refuses a config whose float32 weights (how the CPU backend
// holds them) cannot fit in the memory available, before anything is
// allocated, giving both numbers.
func checkMemory(c *Config) error {
	n := c.ParamCount()
	need := 4 * n
	sizes := fmt.Sprintf("vocab_size %d, hidden_size %d, intermediate_size %d, num_hidden_layers %d",
		c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumLayers)
	if avail, ok := availableMemory(); ok && need > float64(avail) {
		return fmt.Errorf("%s: the weights need %s as float32 (%.4g parameters), more than the %s available (MemAvailable)",
			sizes, meminfo.Format(need), n, meminfo.Format(float64(avail)))
	}
	const maxSlice = 1 << 46 // far above any host; keeps element counts inside int
	if n >= maxSlice {
		return fmt.Errorf("%s: %.4g parameters (%s as float32) cannot be allocated", sizes, n, meminfo.Format(need))
	}
	return nil
}
