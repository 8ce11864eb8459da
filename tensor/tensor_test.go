package tensor

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// TestFillNormalSeeded: the values depend on the seed alone (the same on
// one goroutine as on many), each chunk is its own stream, and the draws
// have the asked mean and spread.
func TestFillNormalSeeded(t *testing.T) {
	n := 3*normalChunk + 17
	a, b := New[float32]("a", n), New[float32]("b", n)
	a.FillNormalSeeded(5, 1, 0.5)
	prev := runtime.GOMAXPROCS(1)
	b.FillNormalSeeded(5, 1, 0.5)
	runtime.GOMAXPROCS(prev)
	if !slices.Equal(a.Data(), b.Data()) {
		t.Fatal("FillNormalSeeded depends on the goroutine count")
	}
	rng := rand.New(rand.NewPCG(5, 2))
	for i := range 10 {
		if want := float32(1 + 0.5*rng.NormFloat64()); a.Data()[2*normalChunk+i] != want {
			t.Fatalf("element %d of chunk 2: %v, want %v from stream (5, 2)", i, a.Data()[2*normalChunk+i], want)
		}
	}
	var sum, sq float64
	for _, x := range a.Data() {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	mean := sum / float64(n)
	if sd := math.Sqrt(sq/float64(n) - mean*mean); math.Abs(mean-1) > 1e-3 || math.Abs(sd-0.5) > 1e-3 {
		t.Fatalf("mean %v, sd %v; want 1, 0.5", mean, sd)
	}
}
