package decodebench

import (
	"dflash/dtype"
	"dflash/model/dflash"
	"dflash/tensor"
)

// The passes, in the report's order.
const (
	Decode  = "decode"  // one token with the cache (model.Step)
	Verify  = "verify"  // a block of BlockSize tokens with the cache, every logit read back (model.Decode)
	Propose = "propose" // the drafter's block (spec.DFlash's Propose)
)

// Taus are the acceptance lengths the report gives the implied speedups at.
var Taus = []float64{3, 5, 7}

// SpeedupFormula is ImpliedSpeedup's formula, as the report states it.
const SpeedupFormula = "tau * t_decode / (t_propose + t_verify)"

// ImpliedSpeedup returns the speedup of speculative decoding over plain
// decoding at acceptance length tau from the times of a decode step, a
// proposal and a verification (any one unit):
//
//	tau · decode / (propose + verify)
//
// 0 when the round takes no time (an unknown bound).
func ImpliedSpeedup(tau, decode, propose, verify float64) float64 {
	if propose+verify <= 0 {
		return 0
	}
	return tau * decode / (propose + verify)
}

// deviceDTypes returns the element types of the weights a pass reads and
// of the KV caches on device, for a dry run, which has no storage to ask:
// bf16 on cuda (a frozen arena's compute copy and AllocKeep, as package
// tensorcuda stores them), float32 on the CPU. A run reads them from its
// storage.
func deviceDTypes(device string) (weights, kv dtype.DType) {
	if device == "cuda" {
		return dtype.BF16, dtype.BF16
	}
	return dtype.F32, dtype.F32
}

// passBytes returns the passes of o (in the report's order) with the
// bytes each reads at least, weights of w and keys and values of kv:
//
//   - decode and verify: the target's DecodeParams (all but the
//     embedding) and its cache's keys and values of Context+1 and
//     Context+BlockSize positions;
//   - propose: the drafter's ProposeParams (its layers, final norm and the
//     LM head) and its context's keys and values of Context+BlockSize
//     positions (the block's own written there first).
func passBytes(o Options, dc *dflash.Config, w, kv dtype.DType) []Phase {
	tc := &o.Target
	B := o.BlockSize
	target := int64(tc.DecodeParams()) * int64(w.Size())
	cache := func(n int) int64 { return tensor.KVBytes(tc.NumLayers, tc.NumKVHeads, tc.HeadDim, n, kv.Size()) }
	ps := []Phase{
		{Name: Decode, Tokens: 1, Positions: o.Context + 1, WeightBytes: target, KVBytes: cache(o.Context + 1)},
		{Name: Verify, Tokens: B, Positions: o.Context + B, WeightBytes: target, KVBytes: cache(o.Context + B)},
		{Name: Propose, Tokens: B, Positions: o.Context + B, WeightBytes: int64(dc.ProposeParams()) * int64(w.Size()),
			KVBytes: tensor.KVBytes(dc.NumLayers, dc.NumKVHeads, dc.HeadDim, o.Context+B, kv.Size())},
	}
	for i := range ps {
		ps[i].Bytes = ps[i].WeightBytes + ps[i].KVBytes
	}
	return ps
}
