package dflash

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"dflash/internal/testseed"
	"dflash/tensor"
)

// TestEvalCache: with EvalCache, evaluations give the metrics of a session
// that runs the target at every evaluation, bit for bit, packed or a
// sample a row, while the target runs only at the first evaluation (once a
// batch) and after Free; the drafter changes between evaluations, so the
// later ones are not the first's again. The kept elements are those
// EvalCacheSize counts.
func TestEvalCache(t *testing.T) {
	seed := testseed.Seed(t)
	m, ex := tinyTargetData(t, seed, 14, true)
	backend := tensor.NewCPU[float32](2)
	packing, err := NewPacking(ex[5:], ex[:5], 5, 40) // rows of one or two samples, a row a batch: several batches
	if err != nil {
		t.Fatal(err)
	}
	for _, pack := range []*Packing{nil, &packing} {
		// run evaluates 4 times, scaling the drafter's weights between
		// evaluations and freeing the cache after the third; it returns the
		// metrics and the target's calls before each evaluation and at the end.
		run := func(cache bool) (ms []*Metrics, calls []int, s *Session) {
			c := DrafterConfigFor(m, 1, []int{1, 2}, 4, 59)
			c.NumAnchors = 5
			s = &Session{Drafter: New[float32](c, rand.New(rand.NewPCG(seed, 2))), Head: HeadOf(m), Backend: backend,
				Train: ex[5:], Eval: ex[:5], BatchSize: 1, Pad: 0, Seed: seed, Pack: pack, EvalCache: cache}
			hidden, n := TargetHidden(m, c.TargetLayerIDs, backend), 0
			s.Hidden = func(b *Batch) error { n++; return hidden(b) }
			for e := range 4 {
				calls = append(calls, n)
				ev, err := s.Evaluate()
				if err != nil {
					t.Fatal(err)
				}
				ms = append(ms, ev)
				for _, p := range s.Drafter.Params() {
					for i := range p.Data() {
						p.Data()[i] *= 1.05
					}
				}
				if e == 1 && cache {
					checkKept(t, s, c)
				}
				if e == 2 {
					s.Free()
				}
			}
			return ms, append(calls, n), s
		}
		want, wantCalls, s := run(false)
		got, gotCalls, _ := run(true)
		batches := len(s.evalPlan)
		if batches < 2 {
			t.Fatalf("packed %v: %d evaluation batches, want several", pack != nil, batches)
		}
		for e := range want {
			if !reflect.DeepEqual(got[e], want[e]) {
				t.Errorf("packed %v, evaluation %d: %+v with the cache, %+v without", pack != nil, e, got[e], want[e])
			}
		}
		if reflect.DeepEqual(want[0], want[1]) {
			t.Errorf("packed %v: the drafter's change left the metrics as they were: %+v", pack != nil, want[0])
		}
		// Without the cache every evaluation runs the target over every batch;
		// with it, the first and the one after Free.
		for e := range 4 {
			w, g := wantCalls[e+1]-wantCalls[e], gotCalls[e+1]-gotCalls[e]
			cached := 0
			if e == 0 || e == 3 {
				cached = batches
			}
			if w != batches || g != cached {
				t.Errorf("packed %v, evaluation %d of %d batches: the target ran %d times with the cache (want %d), %d without",
					pack != nil, e, batches, g, cached, w)
			}
		}
	}
}

// checkKept checks that the kept hidden states of s are EvalCacheSize's.
func checkKept(t *testing.T, s *Session, c *Config) {
	t.Helper()
	batches, elems, err := EvalCacheSize(s.Eval, s.BatchSize, s.Pack, s.Seed, c)
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, taps := range s.evalTaps {
		for _, x := range taps {
			kept += x.Numel()
		}
	}
	if batches != len(s.evalTaps) || elems != float64(kept) {
		t.Errorf("packed %v: EvalCacheSize says %d batches of %g elements, the cache keeps %d of %d", s.Pack != nil, batches, elems, len(s.evalTaps), kept)
	}
}
