package recipe

import (
	"strings"
	"testing"

	"dflash/internal/testlog"
	"dflash/model/dflash"
)

// TestFitEvalCache: the evaluation cache is kept when the step and the
// cache fit in the free bytes (or the free bytes are unknown), dropped
// with a warning naming the sizes when only the step fits, and dropped
// silently when the step alone does not fit (the run is refused then);
// the estimate returned counts the cache only when it is kept.
func TestFitEvalCache(t *testing.T) {
	step := dflash.Memory{TargetWeights: 300 << 20, DrafterState: 100 << 20, Activations: 100 << 20}
	withCache := step
	withCache.EvalCache = 200 << 20
	j := &job{evalBatches: 3}
	for _, c := range []struct {
		name      string
		m         dflash.Memory
		free      float64
		keep      bool
		log, want string
	}{
		{"fits", withCache, 800 << 20, true, "INFO", `msg="eval cache" batches=3 size="200.0 MiB" on=device`},
		{"unknown free memory", withCache, -1, true, "INFO", `msg="eval cache" batches=3 size="200.0 MiB" on=device`},
		{"only the step fits", withCache, 600 << 20, false, "WARN",
			`msg="eval cache off: every evaluation runs the target" batches=3 size="200.0 MiB" why="the step needs about 500.0 MiB on the device, with the cache more than the 600.0 MiB free"`},
		{"the step does not fit", withCache, 400 << 20, false, "", ""},
		{"no cache", step, 800 << 20, false, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := testlog.Capture(t)
			m, keep := j.fitEvalCache(c.m, c.free, "device")
			want := step
			if c.keep {
				want = withCache
			}
			if keep != c.keep || m != want {
				t.Errorf("kept %v with estimate %+v, want %v with %+v", keep, m, c.keep, want)
			}
			out := log.String()
			if c.want == "" && out != "" || c.want != "" && (!strings.Contains(out, "level="+c.log) || !strings.Contains(out, c.want)) {
				t.Errorf("logged %q, want a %s line with %q", out, c.log, c.want)
			}
		})
	}
}
