package train

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
)

// resume restores a run from the checkpoint l into st, params (values,
// moments, step count) and rng, after checking that l belongs to the same run.
func resume(l *Loaded, st *TrainerState, cfg Config, h Hooks, params *Params, rng *RNG) error {
	ls := l.State
	if ls.Seed != cfg.Seed {
		return fmt.Errorf("%s: seed %d, config says %d", l.Dir, ls.Seed, cfg.Seed)
	}
	if diff := identityDiff(ls.Identity, h.Identity); diff != "" {
		if !cfg.ResumeAnyway {
			return fmt.Errorf("%s belongs to another run:\n%s\npass --resume-anyway to continue from it regardless, or choose another --out", l.Dir, diff)
		}
		slog.Warn("resuming a checkpoint of another run (--resume-anyway)", "checkpoint", l.Dir, "differences", diff)
	}
	if ls.Schedule != st.Schedule {
		slog.Warn("learning-rate schedule differs from the checkpoint's; using the config's", "checkpoint", ls.Schedule, "config", st.Schedule)
	}
	if ls.Step > cfg.Steps {
		return fmt.Errorf("%s: checkpoint is at step %d, past steps = %d", l.Dir, ls.Step, cfg.Steps)
	}
	if err := params.Load(l.Dir); err != nil {
		return err
	}
	if err := rng.UnmarshalBinary(ls.RNG); err != nil {
		return fmt.Errorf("%s: %w", l.Dir, err)
	}
	if h.RestoreData != nil {
		if err := h.RestoreData(ls.DataPosition); err != nil {
			return fmt.Errorf("%s: restore data position: %w", l.Dir, err)
		}
	}
	st.Step, st.Tokens, st.LR, st.ElapsedSec = ls.Step, ls.Tokens, ls.LR, ls.ElapsedSec
	if ls.Best != nil {
		st.Best, st.BestStep = ls.Best, ls.BestStep
	}
	if st.BestStep == nil {
		st.BestStep = map[string]int{}
	}
	return nil
}

// withSkipped adds to err, which refused the checkpoint that resume chose, the newer
// checkpoints it passed over as invalid (Loaded.Skipped), each with why, so that a
// refusal does not hide them.
func withSkipped(err error, skipped []string) error {
	if len(skipped) == 0 {
		return err
	}
	return fmt.Errorf("%w\nnewer checkpoints, skipped as invalid:\n  %s", err, strings.Join(skipped, "\n  "))
}

// identityDiff lists, one per line, the entries in which a checkpoint's identity and
// the current run's differ ("" when they agree).
func identityDiff(ckpt, now map[string]string) string {
	if len(now) == 0 {
		return ""
	}
	if len(ckpt) == 0 {
		return "  the checkpoint records no run identity (written before identities were recorded)"
	}
	keys := slices.Sorted(maps.Keys(now))
	for k := range ckpt {
		if _, ok := now[k]; !ok {
			keys = append(keys, k)
		}
	}
	var b strings.Builder
	for _, k := range keys {
		c, ok1 := ckpt[k]
		n, ok2 := now[k]
		switch {
		case !ok1:
			c = "(not recorded)"
		case !ok2:
			n = "(not given)"
		case c == n:
			continue
		}
		fmt.Fprintf(&b, "  %s: checkpoint %s, now %s\n", k, c, n)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
