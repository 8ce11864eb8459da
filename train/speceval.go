package train

import "fmt"

// SpecEval schedules the real acceptance length during training: every
// SpecEvalEvery steps (and at the end) Run's evaluation asks its Eval hook
// for it too (EvalInfo.Spec), so that metrics.jsonl holds the real number
// (speculative decoding of held-out prompts, package spec) in the same
// record as the simulated one.
type SpecEval struct {
	SpecEvalEvery    int `yaml:"spec_eval_every" help:"decode held-out prompts speculatively every N steps and at the end; the eval record gets the real acceptance length spec_tau beside the simulated tau (0: never)"`
	SpecPrompts      int `yaml:"spec_prompts" help:"held-out prompts decoded by each spec evaluation"`
	SpecMaxNewTokens int `yaml:"spec_max_new_tokens" help:"tokens generated per prompt by each spec evaluation"`
}

// DefaultSpecEval returns the defaults: off, 8 prompts of 64 new tokens
// when turned on.
func DefaultSpecEval() SpecEval { return SpecEval{SpecPrompts: 8, SpecMaxNewTokens: 64} }

func (s SpecEval) validate() error {
	switch {
	case s.SpecEvalEvery < 0:
		return fmt.Errorf("config: spec_eval_every = %d: must not be negative", s.SpecEvalEvery)
	case s.SpecEvalEvery > 0 && s.SpecPrompts < 1:
		return fmt.Errorf("config: spec_prompts = %d: must be at least 1", s.SpecPrompts)
	case s.SpecEvalEvery > 0 && s.SpecMaxNewTokens < 1:
		return fmt.Errorf("config: spec_max_new_tokens = %d: must be at least 1", s.SpecMaxNewTokens)
	}
	return nil
}

// due reports whether the evaluation after step (of end) includes the
// spec evaluation.
func (s SpecEval) due(step, end int) bool {
	return s.SpecEvalEvery > 0 && (step%s.SpecEvalEvery == 0 || step == end)
}
