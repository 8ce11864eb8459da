package spec

import (
	"context"
	"slices"
	"strconv"

	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
)

// Prompts returns the prompts of conversations: the tokens before the first
// label (the first assistant token), skipping examples without one.
func Prompts(ex []dflash.Example) [][]int32 {
	var out [][]int32
	for _, e := range ex {
		if n := slices.Index(e.Mask, 1); n > 0 {
			out = append(out, e.IDs[:n])
		}
	}
	return out
}

// EvalFunc returns a dflash.Session.SpecEval that greedily decodes up to
// prompts held-out conversations (maxNew tokens each, ending at the
// target's EOS tokens) on b with the drafter as it is at the call, and
// reports spec_tau, the real acceptance length, spec_pos_<s>, the
// acceptance at block position s, and spec_tokens_per_s.
//
// It runs between training steps on the training backend and leaves it as
// a step leaves it: every round's step memory is released (Generate), the
// KV caches are freed in the reverse order of their allocation (a device
// allocator's cache of each size is then as before, so the next step's
// block masks get their addresses back and its CUDA graphs replay), and it
// ends with ResetStep, as each of Session.Evaluate's batches does.
func EvalFunc(b tensor.Backend[float32], target *model.Model, d *dflash.Drafter[float32], eval []dflash.Example, prompts, maxNew int) (func(context.Context) (map[string]float64, error), error) {
	sd, err := NewDFlash(target, d, b)
	if err != nil {
		return nil, err
	}
	ps := Prompts(eval)
	ps = ps[:min(len(ps), prompts)]
	var stop []int32
	for _, e := range target.Config.EOSTokenIDs {
		stop = append(stop, int32(e))
	}
	return func(ctx context.Context) (map[string]float64, error) {
		r, err := Run(ctx, b, target, sd, ps, Options{MaxNewTokens: maxNew, Stop: stop}, 1, false, nil)
		b.ResetStep()
		if err != nil {
			return nil, err
		}
		out := map[string]float64{"spec_tau": r.AcceptanceLength, "spec_tokens_per_s": r.Speculative.TokensPerS}
		for s, a := range r.PositionAcceptance {
			out["spec_pos_"+strconv.Itoa(s+1)] = a
		}
		return out, nil
	}, nil
}
