package train

// SpecEval schedules the real acceptance length during training: every
// SpecEvalEvery steps (and at the end) Run's evaluation asks its Eval hook
// for it too (EvalInfo.Spec), so that metrics.jsonl holds the real number
// (speculative decoding of held-out prompts, package spec) in the same
// record as the simulated one. What is decoded (how many prompts, how many
// tokens) is the hook's: the training recipe's options.
type SpecEval struct {
	SpecEvalEvery int `yaml:"spec-eval-every" range:">=-1" help:"decode held-out prompts speculatively every N steps and at the end; the eval record gets the real acceptance length spec_tau beside the simulated tau (0: never; -1: the device's default, every 500 steps and at the end with --device cuda, never on the cpu)"`
}

// due reports whether the evaluation after step (of end) includes the
// spec evaluation (never for SpecEvalEvery ≤ 0: a caller resolves −1, the
// device's default, before Run).
func (s SpecEval) due(step, end int) bool {
	return s.SpecEvalEvery > 0 && (step%s.SpecEvalEvery == 0 || step == end)
}
