package recipe

import (
	"context"
	"fmt"
	"maps"

	"dflash/model/dflash"
	"dflash/train"
)

// Hooks connects session s to train.Run: its backend and the drafter's
// arena (the optimizer's), each step (loss, metrics, tokens, and the
// samples and FLOPs the rates are made of), each evaluation (with the real
// acceptance length of SpecEval when train.Run asks for it), the data's
// position for checkpoints, and the drafter's config. coll is the rank's
// collective (nil: one rank); it is also s.Ranks.
func Hooks(s *dflash.Session, coll train.Collective) train.Hooks {
	if coll != nil {
		s.Ranks = coll
	}
	return train.Hooks{
		Backend:    s.Backend,
		Arena:      s.Drafter.Arena(),
		Collective: coll,
		Step: func(ctx context.Context, si train.StepInfo) (float64, map[string]float64, int, error) {
			loss, m, in, err := s.Step(si.RNG.Rand)
			if err != nil {
				return 0, nil, 0, err
			}
			b := in.Batch
			var flops float64
			if s.StepFLOPs != nil {
				flops = s.StepFLOPs(b, in.Blocks)
			}
			si.Count(b.Samples(), flops)
			vals := map[string]float64{"acc": m.Accuracy(), "tau": m.Acceptance(), "pad_frac": b.PadFraction()}
			if len(s.Replays()) > 0 {
				c, l := s.ReplayTotals()
				vals["graph_captures"], vals["graph_launches"] = float64(c), float64(l)
			}
			return loss, vals, b.Tokens(), nil
		},
		Eval: func(ctx context.Context, e train.EvalInfo) (map[string]float64, error) {
			m, err := s.Evaluate()
			if err != nil {
				return nil, err
			}
			out := dflash.MetricsMap(m)
			if e.Spec && s.SpecEval != nil {
				sm, err := s.SpecEval(ctx)
				if err != nil {
					return nil, fmt.Errorf("spec evaluation: %w", err)
				}
				maps.Copy(out, sm)
			}
			return out, nil
		},
		DataState:   s.DataState,
		RestoreData: s.RestoreData,
		ModelConfig: func() ([]byte, error) { return s.Drafter.Cfg.MarshalJSON() },
	}
}
