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

// DecodeParams returns the parameters one decoding pass of c reads whole,
// whatever its token count: every parameter but the embedding, whose rows
// the pass only gathers (a tied LM head is that matrix, read whole once):
// ParamCount less vocab × hidden when the LM head is untied.
func (c *Config) DecodeParams() float64 {
	n := c.ParamCount()
	if !c.TieWordEmbeddings {
		n -= float64(c.VocabSize) * float64(c.HiddenSize)
	}
	return n
}

// availableMemory is meminfo.Available, replaced in tests.
var availableMemory = meminfo.Available

// sizes names c's fields that its parameter count grows with.
func (c *Config) sizes() string {
	return fmt.Sprintf("vocab_size %d, hidden_size %d, intermediate_size %d, num_hidden_layers %d",
		c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumLayers)
}

// checkMemory refuses a valid config whose float32 weights (how the CPU
// backend holds them) cannot fit in the memory available, before anything
// is allocated, giving both numbers.
func checkMemory(c *Config) error {
	n := c.ParamCount()
	need := 4 * n
	sizes := c.sizes()
	if avail, ok := availableMemory(); ok && need > float64(avail) {
		return fmt.Errorf("%s: the weights need %s as float32 (%.4g parameters), more than the %s available (MemAvailable)",
			sizes, meminfo.Format(need), n, meminfo.Format(float64(avail)))
	}
	return nil
}

// MaxParams is the most parameters a config may define: 2^46, far above
// any host's memory, so that every element and byte count of them (float64
// weights, gradients, AdamW moments) is exact in float64 and fits in int64
// and in what Go can allocate. Config.Validate and the drafter's refuse
// more, before any size is multiplied in int.
const MaxParams = 1 << 46

// CheckParams refuses n parameters (a ParamCount) above MaxParams, naming
// sizes (the config's fields and their values).
func CheckParams(sizes string, n float64) error {
	if n > MaxParams {
		return fmt.Errorf("%s: %.4g parameters (%s as float32) cannot be allocated (at most 2^46)", sizes, n, meminfo.Format(4*n))
	}
	return nil
}
