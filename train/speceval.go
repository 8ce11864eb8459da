package train

// SpecEval schedules the real acceptance length during training: every
// SpecEvalEvery steps (and at the end) Run's evaluation asks its Eval hook
// for it too (EvalInfo.Spec), so that metrics.jsonl holds the real number
// (speculative decoding of held-out prompts, package spec) in the same
// record as the simulated one.
type SpecEval struct {
	SpecEvalEvery    int `yaml:"spec-eval-every" range:">=0" help:"decode held-out prompts speculatively every N steps and at the end; the eval record gets the real acceptance length spec_tau beside the simulated tau (0: never)"`
	SpecPrompts      int `yaml:"spec-prompts" range:">=1" help:"held-out prompts decoded by each spec evaluation"`
	SpecMaxNewTokens int `yaml:"spec-max-new-tokens" range:">=1" help:"tokens generated per prompt by each spec evaluation"`
}

// DefaultSpecEval returns the defaults: off, 8 prompts of 64 new tokens
// when turned on.
func DefaultSpecEval() SpecEval { return SpecEval{SpecPrompts: 8, SpecMaxNewTokens: 64} }

// due reports whether the evaluation after step (of end) includes the
// spec evaluation.
func (s SpecEval) due(step, end int) bool {
	return s.SpecEvalEvery > 0 && (step%s.SpecEvalEvery == 0 || step == end)
}
