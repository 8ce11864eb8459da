package dflash_test

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"

	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/rngstream"
	"dflash/internal/testseed"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/train/traincuda"
)

// TestGPUEvalCache evaluates a small packed drafter on one GPU three times
// with the evaluation cache and three times without: the metrics are the
// same bit for bit (the kept states are bf16 copies of the target's bf16
// states), the target runs only at the cached session's first evaluation,
// the cache holds at least its bf16 bytes (EvalCacheSize's elements, 2
// bytes each) of device memory, and Free gives them back.
func TestGPUEvalCache(t *testing.T) {
	if n, err := gpu.Count(); err != nil || n < 1 {
		t.Skipf("needs a GPU (found %d: %v)", n, err)
	}
	cache := gputest.NVRTCCache(t, "")
	seed := testseed.Seed(t)
	tc, ex := gpuTestData(seed, 40, 100)
	train, eval := ex[16:], ex[:16]
	one := traincuda.Placement{Ranks: []int{0}, GPUs: []int{0}, World: 1, Comm: traincuda.NoComm}
	err := traincuda.RunRanks(context.Background(), cache, one, 0, func(env traincuda.RankEnv) error {
		if err := env.Backend.SetDeterministic(); err != nil {
			return err
		}
		target, err := model.New(tc, 5)
		if err != nil {
			return err
		}
		target.Arena().Place(env.Backend, false)
		dc := dflash.DrafterConfigFor(target, 2, nil, 8, tc.VocabSize-1)
		dc.NumAnchors = 16
		packing, err := dflash.NewPacking(train, eval, dc.NumAnchors, 256)
		if err != nil {
			return err
		}
		// session returns a session of its own drafter (the same weights)
		// and the count of its target's passes.
		session := func(keep bool) (*dflash.Session, *int) {
			d := dflash.New[float32](dc, rand.New(rand.NewPCG(seed, rngstream.Init)))
			d.Arena().Place(env.Backend, true)
			hidden, n := dflash.TargetHidden(target, dc.TargetLayerIDs, env.Backend), 0
			return &dflash.Session{Drafter: d, Head: dflash.HeadOf(target), Backend: env.Backend, Train: train, Eval: eval,
				BatchSize: 2, Seed: seed, Pack: &packing, EvalCache: keep,
				Hidden: func(b *dflash.Batch) error { n++; return hidden(b) }}, &n
		}
		batches, elems, err := dflash.EvalCacheSize(eval, 2, &packing, seed, dc)
		if err != nil {
			return err
		}
		plain, plainRuns := session(false)
		kept, keptRuns := session(true)
		for e := range 3 {
			want, err := plain.Evaluate()
			if err != nil {
				return err
			}
			before := env.Device.AllocStats().InUseBytes
			got, err := kept.Evaluate()
			if err != nil {
				return err
			}
			grew := env.Device.AllocStats().InUseBytes - before
			if !reflect.DeepEqual(got, want) {
				t.Errorf("evaluation %d: %+v with the cache, %+v without", e, got, want)
			}
			if e == 0 && float64(grew) < 2*elems {
				t.Errorf("the first evaluation kept %d bytes more on the device, the cache's %d batches are %g bf16 bytes", grew, batches, 2*elems)
			}
			t.Logf("evaluation %d: loss %.6f, device memory in use +%d bytes", e, got.Loss(), grew)
		}
		if *plainRuns != 3*batches || *keptRuns != batches {
			t.Errorf("the target ran %d times with the cache (want %d: once a batch), %d without (want %d)", *keptRuns, batches, *plainRuns, 3*batches)
		}
		before := env.Device.AllocStats().InUseBytes
		kept.Free()
		if freed := before - env.Device.AllocStats().InUseBytes; float64(freed) < 2*elems {
			t.Errorf("Free gave back %d bytes, the cache holds %g", freed, 2*elems)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
