// Package testseed gives tests their random seed: DFLASH_SEED when it is set
// (to replay a failure), else the clock, logged either way so that every
// failing run can be replayed.
package testseed

import (
	"math/rand/v2"
	"testing"
	"time"

	"dflash/internal/switches"
)

// Seed returns the test's seed, DFLASH_SEED if set, else the clock, and logs
// "seed N (DFLASH_SEED=N to replay)". A DFLASH_SEED that is not an unsigned
// integer fails the test.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed, set, err := switches.Seed.Lookup()
	if err != nil {
		t.Fatalf("%v", err)
	}
	if !set {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (%s=%d to replay)", seed, switches.Seed.Name, seed)
	return seed
}

// New returns a generator seeded with Seed(t).
func New(t testing.TB) *rand.Rand {
	t.Helper()
	return rand.New(rand.NewPCG(Seed(t), 0))
}
