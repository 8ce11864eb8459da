// Package testseed gives tests their random seed: DFLASH_SEED when it is set
// (to replay a failure), else the clock, logged either way so that every
// failing run can be replayed.
package testseed

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// Env is the environment variable that fixes the seed.
const Env = "DFLASH_SEED"

// Seed returns the test's seed, DFLASH_SEED if set, else the clock, and logs
// "seed N (DFLASH_SEED=N to replay)". A DFLASH_SEED that is not an unsigned
// integer fails the test.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(Env); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer: %v", Env, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (%s=%d to replay)", seed, Env, seed)
	return seed
}

// New returns a generator seeded with Seed(t).
func New(t testing.TB) *rand.Rand {
	t.Helper()
	return rand.New(rand.NewPCG(Seed(t), 0))
}
