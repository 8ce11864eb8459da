package testseed

import (
	"fmt"
	"strings"
	"testing"

	"dflash/internal/switches"
)

// recorder captures what Seed logs and whether it failed.
type recorder struct {
	testing.TB
	logs   []string
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r) // stands in for runtime.Goexit
}

func seedOf(r *recorder) (seed uint64) {
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
	}()
	return Seed(r)
}

func TestSeed(t *testing.T) {
	t.Run("env", func(t *testing.T) {
		t.Setenv(switches.Seed.Name, "12345")
		r := &recorder{TB: t}
		if got := seedOf(r); got != 12345 {
			t.Fatalf("seed %d, want 12345", got)
		}
		if len(r.logs) != 1 || r.logs[0] != "seed 12345 (DFLASH_SEED=12345 to replay)" {
			t.Fatalf("logged %q", r.logs)
		}
		a, b := New(t).Uint64(), New(t).Uint64()
		if a != b {
			t.Fatalf("two generators from DFLASH_SEED differ: %d, %d", a, b)
		}
	})
	t.Run("clock", func(t *testing.T) {
		t.Setenv(switches.Seed.Name, "")
		r := &recorder{TB: t}
		seed := seedOf(r)
		if want := fmt.Sprintf("seed %d (DFLASH_SEED=%d to replay)", seed, seed); len(r.logs) != 1 || r.logs[0] != want {
			t.Fatalf("logged %q, want %q", r.logs, want)
		}
	})
	t.Run("bad", func(t *testing.T) {
		t.Setenv(switches.Seed.Name, "-3")
		r := &recorder{TB: t}
		seedOf(r)
		if !strings.Contains(r.failed, `DFLASH_SEED="-3"`) {
			t.Fatalf("failure %q does not name the variable and value", r.failed)
		}
	})
}
